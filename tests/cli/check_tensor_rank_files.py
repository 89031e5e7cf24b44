"""The stage files of a tensor-parallel plan's ranks hold each weight of the model exactly once per
tensor-parallel group: partition a TorchScript or ONNX model with --layout pp=P,dp=1,tp=T, load
every rank's stage file (stage_<s>_tp<r>.pt, the collectives' library loaded first) and check, for
every parameter and buffer the plan gives a stage, against the model's own state_dict (an ONNX
model's: its initializers by name):
- a weight the plan splits (tensor_parallel.weights: dim, groups) is, on rank r, slice r of each of
  its `groups` parts along `dim` as torch.tensor_split cuts it; the ranks' slices put back
  together are the model's tensor, and their elements add up to its numel (none twice, none lost);
- any other weight is the model's tensor whole on every rank;
- a rank's file holds nothing else but the constants an ONNX stage holds as buffers (c0, c1, ...),
  the same on every rank, and its file's SHA-256 is the plan's.

usage: check_tensor_rank_files.py --partition BIN --ops-library PATH --model PATH --out DIR
           --tensor-parallel T [--stages P] -- PARTITION_ARGS...
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import torch


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def partition(args):
    shutil.rmtree(args.out, ignore_errors=True)
    gpus = args.stages * args.tensor_parallel
    command = [args.partition, args.model, *args.extra, "--device", "cpu", "--gpus", str(gpus),
               "--layout", f"pp={args.stages},dp=1,tp={args.tensor_parallel}", "-o", args.out]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        fail(f"{' '.join(command)}: exit {result.returncode}\n{result.stdout}{result.stderr}")
    with open(os.path.join(args.out, "plan.json")) as f:
        return json.load(f)


def rank_slice(tensor, dim, groups, degree, rank):
    """Rank `rank`'s slices of each of `groups` parts of `dim`, as torch.tensor_split cuts each part."""
    parts = torch.chunk(tensor, groups, dim) if groups > 1 else (tensor,)
    return torch.cat([torch.tensor_split(part, degree, dim)[rank] for part in parts], dim)


def check_stage(stage, model_state, out, degree):
    split = {w["name"]: w for w in stage["tensor_parallel"]["weights"]}
    files = stage["tensor_parallel"]["files"]
    if [f["file"] for f in files] != [f"stage_{stage['id']}_tp{r}.pt" for r in range(degree)]:
        fail(f"stage {stage['id']}: files {files}")
    ranks = []
    for entry in files:
        path = os.path.join(out, entry["file"])
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != entry["sha256"]:
                fail(f"{path}: its SHA-256 is not the plan's")
        ranks.append(torch.jit.load(path).state_dict())
    weights = stage["params"] + stage.get("buffers", [])
    held = {w["stage_name"] for w in weights}
    for r, state in enumerate(ranks):
        constants = {name for name in set(state) - held if re.fullmatch(r"c\d+", name)}
        if set(state) - constants != held:
            fail(f"stage {stage['id']} rank {r} holds {sorted(set(state) ^ held)} beyond or short of the plan's weights")
        for name in constants:
            if not torch.equal(state[name], ranks[0].get(name)):
                fail(f"stage {stage['id']} rank {r}: constant {name} is not rank 0's")
    checked = 0
    for weight in weights:
        whole = model_state[weight["name"]]
        pieces = [state[weight["stage_name"]] for state in ranks]
        if weight["name"] not in split:
            for r, piece in enumerate(pieces):
                if not torch.equal(piece, whole):
                    fail(f"stage {stage['id']} rank {r}: '{weight['name']}' is not the model's, whole")
            continue
        dim, groups = split[weight["name"]]["dim"], split[weight["name"]].get("groups", 1)
        for r, piece in enumerate(pieces):
            if not torch.equal(piece, rank_slice(whole, dim, groups, degree, r)):
                fail(f"stage {stage['id']} rank {r}: '{weight['name']}' is not its slice of dim {dim} "
                     f"({groups} parts)")
        if sum(p.numel() for p in pieces) != whole.numel():
            fail(f"stage {stage['id']}: the slices of '{weight['name']}' hold {sum(p.numel() for p in pieces)} "
                 f"elements of its {whole.numel()}")
        joined = torch.cat([torch.cat([torch.chunk(p, groups, dim)[g] for p in pieces], dim) for g in range(groups)], dim)
        if not torch.equal(joined, whole):
            fail(f"stage {stage['id']}: the slices of '{weight['name']}' put back together are not the model's")
        checked += 1
    return checked, len(weights)


def model_state_dict(path):
    """A TorchScript archive's state_dict (a zip file), else an ONNX model's initializers by name."""
    if zipfile.is_zipfile(path):
        return torch.jit.load(path).state_dict()
    import onnx
    from onnx import numpy_helper
    return {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in onnx.load(path).graph.initializer}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", required=True)
    parser.add_argument("--ops-library", required=True, help="librannc_tensor_parallel.so")
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tensor-parallel", type=int, required=True)
    parser.add_argument("--stages", type=int, default=2)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    args.extra = argv[cut + 1:]
    torch.ops.load_library(args.ops_library)
    plan = partition(args)
    model_state = model_state_dict(args.model)
    split_total = weights_total = 0
    for stage in plan["stages"]:
        if stage.get("tensor_parallel", {}).get("degree", 1) != args.tensor_parallel:
            fail(f"stage {stage['id']} is not split over {args.tensor_parallel} ranks")
        split, weights = check_stage(stage, model_state, args.out, args.tensor_parallel)
        split_total += split
        weights_total += weights
    if split_total == 0:
        fail("no weight is split: the check would prove nothing")
    print(f"OK: {len(plan['stages'])} stages x {args.tensor_parallel} tensor ranks: {split_total} split weights "
          f"are their slices, each element once per group; {weights_total - split_total} others whole on every rank")


if __name__ == "__main__":
    main()
