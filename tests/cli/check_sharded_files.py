"""The files of a sharded plan compose back into the model: the indices module, each rank's shards
and the dense stage give the model's outputs and gradients.

usage: check_sharded_files.py RANNC SAMPLES_DIR OUT_DIR

The DLRM sample (TorchScript) is planned on 4 ranks with a mix of row-wise, data-parallel,
table-wise and column-free placements forced by --table-constraints. Then, in PyTorch alone:
- every table rebuilt from the shard files equals the model's weight, each element from exactly
  one shard (data-parallel tables whole on every rank), and the tables file holds the same;
- the indices module on the model inputs gives what the lookups read, the tables module (its
  tables replaced by the ones rebuilt from the shards) the pooled lookups, and each table's pooled
  rows equal the sum of its rows at the ids its `lookup_args` name;
- the dense stage on the dense input and the pooled lookups gives the model's output, and
  backward gives every gradient of the model: the dense stage's parameters directly, each
  table's through the tables module;
- the files' SHA-256 are the plan's, and the plan matches the schema;
- verify, which checks pipeline plans, refuses the plan with one line (rannc-run trains it:
  tests/runtime/check_sharded_training.py).
"""
import hashlib
import json
import os
import sys

import torch

import plan_schema
from plan_runs import fail, run

BATCH = 4  # the batch the sample was traced at (its trace runs at no other)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def rebuild_tables(plan, folder, model_state):
    shards = [torch.load(os.path.join(folder, entry["file"])) for entry in plan["sharding"]["files"]["shards"]]
    tables = {}
    for table in plan["sharding"]["tables"]:
        rebuilt = torch.full((table["rows"], table["dim"]), float("nan"))
        covered = torch.zeros(table["rows"], table["dim"], dtype=torch.int32)
        for shard in table["shards"]:
            (r0, r1), (c0, c1) = shard["rows"], shard["cols"]
            piece = shards[shard["rank"]][table["name"]]
            if list(piece.shape) != [r1 - r0, c1 - c0]:
                fail(f"{table['name']} on rank {shard['rank']}: shard of shape {list(piece.shape)}, plan says {[r1 - r0, c1 - c0]}")
            rebuilt[r0:r1, c0:c1] = piece
            covered[r0:r1, c0:c1] += 1
        expected = len(table["shards"]) if table["type"] == "data_parallel" else 1
        if not torch.all(covered == expected):
            fail(f"{table['name']}: shards cover elements {covered.min().item()}..{covered.max().item()} times")
        if not torch.equal(rebuilt, model_state[table["name"]]):
            fail(f"{table['name']}: the shards differ from the model's weight")
        tables[table["name"]] = rebuilt
    return tables


def main():
    rannc, samples, out = sys.argv[1:4]
    folder = os.path.join(out, "dlrm_sharded")
    constraints = os.path.join(out, "constraints.json")
    os.makedirs(out, exist_ok=True)
    with open(constraints, "w") as f:
        json.dump({"tables": {"tables.0.weight": {"sharding_types": ["row_wise"]},
                              "tables.1.weight": {"sharding_types": ["data_parallel"]},
                              "tables.2.weight": {"sharding_types": ["table_wise"]},
                              "tables.5.weight": {"sharding_types": ["row_wise"]}}}, f)
    model_path = os.path.join(samples, "dlrm.trace.pt")
    run([rannc, model_path, "--input", f"dense:{BATCH}x13:float32", "--input", f"sparse:{BATCH}x8x5:int64", "--gpus", "4",
         "--table-constraints", constraints, "-o", folder])
    with open(os.path.join(folder, "plan.json")) as f:
        plan = json.load(f)
    plan_schema.check(plan, folder)
    files = plan["sharding"]["files"]
    named = [files["indices"], files["tables"], *files["shards"], plan["stages"][0]]
    for entry in named:
        if sha256(os.path.join(folder, entry["file"])) != entry["sha256"]:
            fail(f"{entry['file']}: SHA-256 differs from the plan's")
    types = {t["type"] for t in plan["sharding"]["tables"]}
    if not {"row_wise", "data_parallel", "table_wise"} <= types:
        fail(f"the constraints did not give a mix of types: {types}")

    model = torch.jit.load(model_path)
    state = {k: v.detach() for k, v in model.named_parameters()}
    tables = rebuild_tables(plan, folder, state)
    tables_module = torch.jit.load(os.path.join(folder, files["tables"]["file"]))
    for table in plan["sharding"]["tables"]:
        if not torch.equal(getattr(tables_module, table["stage_name"]), state[table["name"]]):
            fail(f"the tables file's {table['stage_name']} is not {table['name']}")

    generator = torch.Generator().manual_seed(0)
    dense = torch.randn(BATCH, 13, generator=generator)
    sparse = torch.randint(0, 1000, (BATCH, 8, 5), generator=generator)
    inputs = {"dense": dense, "sparse": sparse}

    reference = model(dense, sparse)
    reference.sum().backward()
    reference_grads = {k: v.grad.clone() for k, v in model.named_parameters()}

    indices_module = torch.jit.load(os.path.join(folder, files["indices"]["file"]))
    lookup_inputs = indices_module(*[inputs[name] for name in files["indices"]["inputs"]])
    lookup_inputs = list(lookup_inputs) if isinstance(lookup_inputs, (tuple, list)) else [lookup_inputs]
    leaves = {}
    for table in plan["sharding"]["tables"]:
        leaves[table["name"]] = getattr(tables_module, table["stage_name"])
        with torch.no_grad():
            leaves[table["name"]].copy_(tables[table["name"]])
    pooled_list = tables_module(*lookup_inputs)
    pooled_list = list(pooled_list) if isinstance(pooled_list, (tuple, list)) else [pooled_list]
    pooled = {}
    for table, rows in zip(plan["sharding"]["tables"], pooled_list):
        ids = lookup_inputs[table["lookup_args"][0]].reshape(BATCH, -1)  # fixed bags: ids of one sample in a row
        expected = tables[table["name"]][ids].sum(1)
        if table["pooling_mode"] == "mean":
            expected = expected / ids.shape[1]
        if not torch.allclose(rows, expected, rtol=1e-6, atol=1e-6):
            fail(f"{table['name']}: pooled lookups differ from its rows at the ids of lookup_args")
        pooled[table["name"]] = rows
    stage = plan["stages"][0]
    dense_module = torch.jit.load(os.path.join(folder, stage["file"]))
    args = [inputs[i["source"]["model_input"]] if "model_input" in i["source"] else pooled[i["source"]["embedding"]]
            for i in stage["inputs"]]
    outputs = dense_module(*args)
    output = outputs[0] if isinstance(outputs, (tuple, list)) else outputs
    if not torch.allclose(output, reference, rtol=1e-5, atol=1e-6):
        fail(f"the composed output differs from the model's by {(output - reference).abs().max().item():.3g}")
    output.sum().backward()
    compared = 0
    stage_params = dict(dense_module.named_parameters())
    for weight in stage["params"]:
        grad = stage_params[weight["stage_name"]].grad
        if not torch.allclose(grad, reference_grads[weight["name"]], rtol=1e-4, atol=1e-6):
            fail(f"gradient of {weight['name']} differs by {(grad - reference_grads[weight['name']]).abs().max().item():.3g}")
        compared += 1
    for name, leaf in leaves.items():
        if leaf.grad is None or not torch.allclose(leaf.grad, reference_grads[name], rtol=1e-4, atol=1e-6):
            fail(f"gradient of table {name} differs by {(leaf.grad - reference_grads[name]).abs().max().item():.3g}")
        compared += 1
    if compared != len(reference_grads):
        fail(f"compared {compared} gradients of the model's {len(reference_grads)}")
    print(f"sharded files of the DLRM sample ({sorted(types)}): output and all {compared} gradients equal the model's")
    plan_path = os.path.join(folder, "plan.json")
    refused = run([rannc, "verify", plan_path], expect=2).stderr
    if refused.count("a sharded plan of embedding tables") != 1 or len(refused.strip().splitlines()) != 1:
        fail(f"verify did not refuse the sharded plan with one line:\n{refused}")
    print("verify refuses the sharded plan (this composition is its check) with one line")


if __name__ == "__main__":
    main()
