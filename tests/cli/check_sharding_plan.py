"""Sharded plans of recommendation models (rannc-partition on a model of pooled embedding tables):
what issue 17 asks of them, on the shape-only DLRMs and the DLRM sample.

usage: check_sharding_plan.py RANNC SAMPLES_DIR SHAPE_ONLY_DIR OUT_DIR

- Criteo Kaggle on 8 devices: the 8 tables above 1 MiB table-wise on 8 distinct ranks, the
  smallest tables data-parallel, max/mean per-rank step under 1.1; the same inputs give the
  same bytes.
- MLPerf DLRM v1 on 8 x 40 GB (row-wise Adagrad): every rank under its limit, the largest tables
  row-wise or balanced table-wise; on 4 x 16 GB: exit 1 with the shortfall and what would fit.
- MLPerf DLRM v2 on 16 devices (2 nodes): the 100-lookup table not table-wise on one rank; fp16
  all-to-all predicts a shorter step than fp32.
- The 1000-table synthetic on 128 devices: max/mean under 1.1. The 12T synthetic on 128 x 80 GB
  with 4 TiB hosts (from --host-mem or a cluster file's "host"): tables in the host tier; with 1 TiB
  hosts, or with no host stated: exit 1.
- --table-constraints: types, tier and pooling honoured; every malformed file refused.
- The DLRM sample from TorchScript and from ONNX plans the same tables the same way; its dense
  stage reads each table's pooled lookups.
- Plans whose shards do not cover a table exactly once are refused by the reader.
Every plan written is checked against docs/plan.schema.json.
"""
import copy
import json
import os
import sys

import plan_bytes
import plan_schema
from plan_runs import fail, run

MIB = 1 << 20
GIB = 1 << 30


class Planner:
    def __init__(self, rannc, out):
        self.rannc, self.out = rannc, out

    def plan(self, model, name, *args):
        folder = os.path.join(self.out, name)
        run([self.rannc, model, "--plan-only", "-o", folder, *args])
        path = os.path.join(folder, "plan.json")
        with open(path) as f:
            plan = json.load(f)
        plan_schema.check(plan, path)
        return plan, path

    def refuse(self, model, name, expect, says, *args):
        result = run([self.rannc, model, "--plan-only", "-o", os.path.join(self.out, name), *args], expect=expect)
        lines = result.stderr.strip().splitlines()
        if len(lines) != 1 or not all(s in lines[0] for s in says):
            fail(f"{name}: expected one line saying {says}, got {result.stderr!r}")
        return lines[0]


def tables_by_name(plan):
    return {t["name"]: t for t in plan["sharding"]["tables"]}


def imbalance(plan):
    steps = [r["step_ms"] for r in plan["sharding"]["ranks"]]
    return max(steps) / (sum(steps) / len(steps))


def table_bytes(t):
    return t["rows"] * t["dim"] * 4


def check_kaggle(p, shape_only):
    model = os.path.join(shape_only, "dlrm-kaggle.onnx")
    plan, path = p.plan(model, "kaggle", "--gpus", "8", "--mem", "80G", "--batch", "4096")
    large = [t for t in plan["sharding"]["tables"] if table_bytes(t) > MIB]
    if len(large) != 8:
        fail(f"Kaggle: {len(large)} tables above 1 MiB, expected 8")
    for t in large:
        if t["type"] != "table_wise":
            fail(f"Kaggle: {t['name']} ({t['rows']} rows) is {t['type']}, expected table_wise")
    ranks = {t["shards"][0]["rank"] for t in large}
    if len(ranks) != 8:
        fail(f"Kaggle: the 8 large tables share ranks: {sorted(ranks)}")
    tiny = [t for t in plan["sharding"]["tables"] if table_bytes(t) <= 32 * 1024]
    not_dp = [t["name"] for t in tiny if t["type"] != "data_parallel"]
    if len(tiny) < 9 or not_dp:
        fail(f"Kaggle: tables of at most 32 KiB not data-parallel: {not_dp} (of {len(tiny)})")
    if imbalance(plan) >= 1.1:
        fail(f"Kaggle: max/mean {imbalance(plan):.3f}")
    again, again_path = p.plan(model, "kaggle-again", "--gpus", "8", "--mem", "80G", "--batch", "4096")
    if plan_bytes.read_without_generator(path) != plan_bytes.read_without_generator(again_path):
        fail("Kaggle: the same inputs gave different plan.json bytes")
    print(f"Kaggle on 8: 8 large tables table-wise on ranks {sorted(ranks)}, {len(tiny)} tiny data-parallel, "
          f"max/mean {imbalance(plan):.3f}, byte-identical twice")


def check_mlperf_v1(p, shape_only):
    model = os.path.join(shape_only, "dlrm-mlperf-v1.onnx")
    plan, _ = p.plan(model, "v1", "--gpus", "8", "--mem", "40G", "--batch", "65536", "--sparse-optimizer", "rowwise_adagrad")
    limit = 40 * GIB
    over = [r["rank"] for r in plan["sharding"]["ranks"] if r["mem_bytes"] > limit]
    if over:
        fail(f"MLPerf v1 on 8 x 40G: ranks {over} over their limit")
    largest = [t for t in plan["sharding"]["tables"] if t["rows"] >= 10_000_000]
    table_wise_ok = imbalance(plan) < 1.1
    for t in largest:
        if t["type"] not in ("row_wise", "table_row_wise") and not (t["type"] == "table_wise" and table_wise_ok):
            fail(f"MLPerf v1: {t['name']} is {t['type']} with max/mean {imbalance(plan):.3f}")
    peak = max(r["mem_bytes"] for r in plan["sharding"]["ranks"])
    line = p.refuse(model, "v1-small", 1, ["need at least", "4 devices of 16.00 GiB have", "would hold them"],
                    "--gpus", "4", "--mem", "16G", "--batch", "65536", "--sparse-optimizer", "rowwise_adagrad")
    print(f"MLPerf v1 on 8 x 40G: peak {peak / GIB:.1f} GiB, {[t['type'] for t in largest]} for the largest; "
          f"on 4 x 16G: {line}")


def check_mlperf_v2(p, shape_only):
    model = os.path.join(shape_only, "dlrm-mlperf-v2.onnx")
    steps = {}
    for dtype in ("fp32", "fp16"):
        plan, _ = p.plan(model, f"v2-{dtype}", "--gpus", "16", "--mem", "80G", "--batch", "65536", "--comm-dtype", dtype)
        hot = max(plan["sharding"]["tables"], key=lambda t: t["pooling"])
        if hot["pooling"] < 100:
            fail(f"MLPerf v2: no table of 100 lookups (largest pooling {hot['pooling']})")
        if hot["type"] == "table_wise" and len(hot["shards"]) == 1:
            fail(f"MLPerf v2 ({dtype}): the 100-lookup table {hot['name']} is table-wise on one rank")
        if any(t["comm_dtype"] != dtype or t["comm_dtype_bwd"] != dtype for t in plan["sharding"]["tables"]):
            fail(f"MLPerf v2: tables do not record the {dtype} all-to-all")
        steps[dtype] = plan["predicted"]["iteration_ms"]
    if not steps["fp16"] < steps["fp32"]:
        fail(f"MLPerf v2: fp16 all-to-all step {steps['fp16']} ms is not below fp32 {steps['fp32']} ms")
    plan, _ = p.plan(model, "v2-mixed", "--gpus", "16", "--mem", "80G", "--batch", "65536", "--comm-dtype", "bf16",
                     "--comm-dtype-bwd", "fp32")
    if plan["sharding"]["comm_dtype"] != "bf16" or plan["sharding"]["comm_dtype_bwd"] != "fp32":
        fail("MLPerf v2: --comm-dtype-bwd not recorded")
    print(f"MLPerf v2 on 16: the 100-lookup table is {hot['type']} on {len(hot['shards'])} ranks; "
          f"step fp32 {steps['fp32']:.3f} ms, fp16 {steps['fp16']:.3f} ms")


def check_large(p, shape_only):
    plan, _ = p.plan(os.path.join(shape_only, "dlrm-synthetic-1000.onnx"), "s1000", "--gpus", "128", "--mem", "80G",
                     "--batch", "65536")
    if len(plan["sharding"]["tables"]) != 1000 or imbalance(plan) >= 1.1:
        fail(f"1000 tables on 128: {len(plan['sharding']['tables'])} tables, max/mean {imbalance(plan):.3f}")
    balance = imbalance(plan)
    model = os.path.join(shape_only, "dlrm-12t.onnx")
    plan, _ = p.plan(model, "12t", "--gpus", "128", "--mem", "80G", "--host-mem", "4T", "--batch", "65536")
    hosted = [t for t in plan["sharding"]["tables"] if t["tier"] == "host"]
    over = [r["rank"] for r in plan["sharding"]["ranks"] if r["mem_bytes"] > 80 * GIB]
    if not hosted or over:
        fail(f"12T: {len(hosted)} tables in the host tier, ranks over 80G: {over}")
    # Balanced, its rows cut over the hosts behind caches that use the devices' memory.
    least_mem = min(r["mem_bytes"] for r in plan["sharding"]["ranks"])
    if imbalance(plan) >= 1.2 or least_mem < 40 * GIB or any(not 0 < t["cache_fraction"] <= 1 for t in hosted):
        fail(f"12T: max/mean {imbalance(plan):.3f}, least device memory {least_mem / GIB:.1f} GiB, caches "
             f"{sorted({t['cache_fraction'] for t in hosted})}")
    balance_12t = imbalance(plan)
    skew_path = os.path.join(p.out, "12t-zipf.json")
    with open(skew_path, "w") as f:
        json.dump({"tables": {t["name"]: {"zipf": 1.05} for t in plan["sharding"]["tables"]}}, f)
    skewed, _ = p.plan(model, "12t-zipf", "--gpus", "128", "--mem", "80G", "--host-mem", "4T", "--batch", "65536",
                       "--table-constraints", skew_path)
    if not (skewed["predicted"]["iteration_ms"] < plan["predicted"]["iteration_ms"]) or \
            any(t["hit_rate"] <= 0.5 for t in skewed["sharding"]["tables"]):
        fail(f"12T with Zipf 1.05 access: {skewed['predicted']['iteration_ms']} ms against uniform "
             f"{plan['predicted']['iteration_ms']} ms, hit rates {sorted({t['hit_rate'] for t in skewed['sharding']['tables']})}")
    line = p.refuse(model, "12t-small", 1, ["of host memory behind device caches", "16 hosts 16.00 TiB"],
                    "--gpus", "128", "--mem", "80G", "--host-mem", "1T", "--batch", "65536")
    # Without --host-mem the host tier is not assumed, nor from a cluster file without a "host".
    p.refuse(model, "12t-no-host", 1, ["need at least", "of device memory"], "--gpus", "128", "--mem", "80G", "--batch", "65536")
    cluster = {"nodes": 16, "gpus_per_node": 8, "device": "h100-80g", "mem": "80G"}
    for name, host in (("12t-file-no-host", None), ("12t-file-host", {"mem": "4T"})):
        path = os.path.join(p.out, name + ".json")
        with open(path, "w") as f:
            json.dump(dict(cluster, host=host) if host else cluster, f)
        if host:
            plan, _ = p.plan(model, name, "--cluster", path, "--batch", "65536")
            if not any(t["tier"] == "host" for t in plan["sharding"]["tables"]):
                fail("12T: a cluster file's host of 4 TiB put no table in the host tier")
        else:
            p.refuse(model, name, 1, ["need at least", "of device memory"], "--cluster", path, "--batch", "65536")
    print(f"1000 tables on 128: max/mean {balance:.3f}; 12T on 128 x 80G: {len(hosted)} tables in host memory, max/mean "
          f"{balance_12t:.3f}, faster with Zipf access; with 1 TiB hosts: {line}")


def sample_args(samples):
    return ["--input", "dense:64x13:float32", "--input", "sparse:64x8x5:int64", "--gpus", "4"]


def check_constraints(p, samples, out):
    model = os.path.join(samples, "dlrm.onnx")
    path = os.path.join(out, "constraints.json")

    def write(document):
        with open(path, "w") as f:
            f.write(document if isinstance(document, str) else json.dumps(document))

    write({"tables": {"tables.0.weight": {"sharding_types": ["row_wise"]},
                      "tables.1.weight": {"sharding_types": ["data_parallel"], "pooling": 20},
                      "tables.2.weight": {"sharding_types": ["table_wise"], "tier": "device"},
                      "tables.3.weight": {"sharding_types": ["table_wise", "row_wise"]}}})
    plan, _ = p.plan(model, "constrained", *sample_args(samples), "--table-constraints", path)
    tables = tables_by_name(plan)
    expected = {"tables.0.weight": {"row_wise"}, "tables.1.weight": {"data_parallel"}, "tables.2.weight": {"table_wise"},
                "tables.3.weight": {"table_wise", "row_wise"}}
    for name, types in expected.items():
        if tables[name]["type"] not in types:
            fail(f"constraints: {name} is {tables[name]['type']}, allowed {types}")
    if tables["tables.1.weight"]["pooling"] != 20 or tables["tables.2.weight"]["pooling"] != 5:
        fail(f"constraints: pooling {tables['tables.1.weight']['pooling']} and {tables['tables.2.weight']['pooling']}")
    bad = [("unknown table", {"tables": {"nope": {}}}, "tables.nope: not an embedding table"),
           ("unknown type", {"tables": {"tables.0.weight": {"sharding_types": ["diagonal"]}}}, "is not a sharding type"),
           ("unknown key", {"tables": {"tables.0.weight": {"pool": 3}}}, "unknown key 'pool'"),
           ("bad pooling", {"tables": {"tables.0.weight": {"pooling": -1}}}, "is not a pooling factor"),
           ("bad tier", {"tables": {"tables.0.weight": {"tier": "disk"}}}, "is not a tier"),
           ("bad zipf", {"tables": {"tables.0.weight": {"zipf": 0}}}, "is not a Zipf exponent"),
           ("bad hit rate", {"tables": {"tables.0.weight": {"hit_rate": 1.5}}}, "is not a hit rate"),
           ("zipf and hit rate", {"tables": {"tables.0.weight": {"zipf": 1, "hit_rate": 0.5}}}, "not both"),
           ("no placement", {"tables": {"tables.0.weight": {"sharding_types": ["column_wise"]}}}, "leave it no placement"),
           ("host without --host-mem", {"tables": {"tables.0.weight": {"tier": "host"}}}, "leave it no placement"),
           ("not an object", [1, 2], "expected {\"tables\""),
           ("not JSON", "{\"tables\": ", "not valid JSON")]
    for name, document, says in bad:
        write(document)
        p.refuse(model, "bad-constraints", 2, [says], *sample_args(samples), "--table-constraints", path)
    p.refuse(model, "bad-constraints", 2, ["not a regular file"], *sample_args(samples), "--table-constraints", "/dev/zero")
    p.refuse(model, "bad-constraints", 2, ["no such file"], *sample_args(samples), "--table-constraints", path + ".missing")
    print(f"--table-constraints: types, tier and pooling honoured; {len(bad) + 2} bad files refused")
    return plan


def check_frontends_and_stage(p, samples):
    plans = {}
    for name in ("dlrm.onnx", "dlrm.trace.pt"):
        plan, _ = p.plan(os.path.join(samples, name), "sample-" + name, *sample_args(samples))
        plans[name] = plan
    keys = ("name", "rows", "dim", "pooling", "pooling_mode", "type", "tier", "shards")
    onnx, torch_script = ([{k: t[k] for k in keys} for t in plans[n]["sharding"]["tables"]] for n in plans)
    if onnx != torch_script or len(onnx) != 8:
        fail(f"the DLRM sample plans differently from ONNX and TorchScript:\n{onnx}\n{torch_script}")
    # The dense part's memory too, though ONNX leaves the pooled lookups' shapes unknown.
    memory = {n: plans[n]["stages"][0]["predicted"]["memory"] for n in plans}
    if memory["dlrm.onnx"] != memory["dlrm.trace.pt"]:
        fail(f"the dense part's memory differs between ONNX and TorchScript: {memory}")
    for name, plan in plans.items():
        stage = plan["stages"][0]
        fed = {i["source"].get("embedding") for i in stage["inputs"]} - {None}
        if fed != {t["name"] for t in plan["sharding"]["tables"]} or len(stage["ranks"]) != 4:
            fail(f"{name}: the dense stage reads pooled lookups of {sorted(fed)} on {stage['ranks']}")
        if any(p["name"].startswith("tables.") for p in stage["params"]):
            fail(f"{name}: the dense stage holds embedding tables")
    print("the DLRM sample: the same 8 tables placed alike from ONNX and TorchScript; the dense stage reads their pooled lookups")


def check_reader(rannc, plan, out):
    """Shards that miss or overlap rows, ranks outside the cluster, unknown pooled inputs."""
    row_wise = next(i for i, t in enumerate(plan["sharding"]["tables"]) if t["type"] == "row_wise")
    cases = []
    missing = copy.deepcopy(plan)
    del missing["sharding"]["tables"][row_wise]["shards"][-1]
    cases.append((missing, "do not cover"))
    overlap = copy.deepcopy(plan)
    overlap["sharding"]["tables"][row_wise]["shards"][1]["rows"][0] -= 1
    cases.append((overlap, "overlap"))
    outside = copy.deepcopy(plan)
    outside["sharding"]["tables"][row_wise]["shards"][0]["rank"] = 99
    cases.append((outside, "is not a rank of the cluster"))
    beyond = copy.deepcopy(plan)
    beyond["sharding"]["tables"][row_wise]["shards"][-1]["rows"][1] += 1
    cases.append((beyond, "must be in"))
    source = copy.deepcopy(plan)
    next(i for i in source["stages"][0]["inputs"] if "embedding" in i["source"])["source"]["embedding"] = "nope"
    cases.append((source, "is not a table of the sharding section"))
    path = os.path.join(out, "bad-sharding", "plan.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for document, says in cases:
        with open(path, "w") as f:
            json.dump(document, f)
        result = run([rannc, "show", path], expect=2)
        if says not in result.stderr or len(result.stderr.strip().splitlines()) != 1:
            fail(f"show of a broken sharding section did not say {says!r}: {result.stderr!r}")
    with open(path, "w") as f:
        json.dump(plan, f)
    shown = run([rannc, "show", path]).stdout
    if "imbalance  step max/mean" not in shown or "tables.0.weight" not in shown:
        fail(f"show does not print the tables and the imbalance:\n{shown}")
    print(f"reader: {len(cases)} broken sharding sections refused; show prints tables, ranks and max/mean")


def main():
    rannc, samples, shape_only, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    p = Planner(rannc, out)
    check_kaggle(p, shape_only)
    check_mlperf_v1(p, shape_only)
    check_mlperf_v2(p, shape_only)
    check_large(p, shape_only)
    constrained = check_constraints(p, samples, out)
    check_frontends_and_stage(p, samples)
    check_reader(rannc, constrained, out)
    p.refuse(os.path.join(samples, "dlrm.onnx"), "odd-batch", 2, ["splits the batch evenly"], "--input", "dense:6x13:float32",
             "--input", "sparse:6x8x5:int64", "--gpus", "4")
    p.refuse(os.path.join(samples, "dlrm.onnx"), "staged", 2, ["do not apply to a sharded plan"], *sample_args(samples),
             "--stages", "2")
    p.refuse(os.path.join(samples, "dlrm.onnx"), "fp8", 2, ["--comm-dtype fp8: unknown"], *sample_args(samples),
             "--comm-dtype", "fp8")
    run([rannc, os.path.join(samples, "dlrm.onnx"), *sample_args(samples), "-o", os.path.join(out, "no-plan-only")], expect=2)
    print("ok")


if __name__ == "__main__":
    main()
