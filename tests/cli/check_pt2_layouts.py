"""One torch.export program in every .pt2 layout (tests/models/make_pt2_layouts.py: PyTorch 2.6's
flat zip, stored and deflated; the PT2 archive of 2.8 with torch.save weights; that of 2.9 with
raw payloads, shared storages, a transposed tensor and offsets) must give the same answers:

1. `inspect` prints the same report (but for the model's path);
2. partition (2 stages on 3 CPU devices, 2 microbatches: replica counts differ) writes the same
   plan.json (but for the model's path and SHA-256) and byte-identical stage files, so every
   weight was read alike whatever the layout, and `verify` passes for each;
3. with --run: rannc-run trains the 2.9 layout's plan 2 steps with --save, and
   `rannc-partition export` of that checkpoint, against each layout (--model), writes the same
   state_dict: the names of the module's state_dict (a tied weight under both its names, as one
   tensor; the persistent buffer; no constant), the same values, and the nn.Module of
   tests/models/pt2/export_tiny_attention.py loads it with strict load_state_dict.

usage: check_pt2_layouts.py --partition BIN [--run BIN] --layouts DIR --out DIR
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(os.path.dirname(HERE), "models", "pt2")
REQUEST = ["--input", "tokens:4x8:int64", "--device", "cpu", "--gpus", "3", "--gpus-per-node", "3", "--stages", "2",
           "--microbatches", "2", "--mem", "8G"]
TRAIN_STEPS = 2


def fail(message):
    sys.exit("FAIL: " + message)


def run(command, timeout=120, ok=(0,)):
    start = time.monotonic()
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    seconds = time.monotonic() - start
    if result.returncode not in ok:
        fail("%s: exit %d after %.1f s\n%s%s" % (" ".join(map(str, command)), result.returncode, seconds,
                                                 result.stdout[-3000:], result.stderr[-3000:]))
    return result, seconds


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def plan_of(folder):
    """plan.json without what names the model file, and the stage files' hashes."""
    with open(os.path.join(folder, "plan.json")) as f:
        plan = json.load(f)
    model = plan.get("model", {})
    for key in ("path", "sha256"):
        model.pop(key, None)
    plan.pop("generator", None)  # its command names the model file too
    stages = {s["file"]: sha256(os.path.join(folder, s["file"])) for s in plan["stages"]}
    return plan, stages


def check_layouts(args, manifest):
    rows, first = [], None
    for layout in manifest["layouts"]:
        model = os.path.join(args.layouts, layout)
        report, _ = run([args.partition, "inspect", model])
        text = report.stdout.replace(model, "MODEL")
        out = os.path.join(args.out, layout.replace(".pt2", ""))
        # verify checks the stage files right after, at its finer tolerance.
        _, plan_seconds = run([args.partition, model, *REQUEST, "--no-check", "-o", out])
        verified, verify_seconds = run([args.partition, "verify", os.path.join(out, "plan.json")])
        verdict = [line for line in verified.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
        if not verdict or not verdict[-1].startswith("PASS"):
            fail("verify of %s's plan: %s" % (layout, verified.stdout[-2000:]))
        plan, stages = plan_of(out)
        rows.append((layout, os.path.getsize(model), plan_seconds, verify_seconds, verdict[-1]))
        if first is None:
            first = (layout, text, plan, stages)
            continue
        if text != first[1]:
            fail("inspect of %s differs from %s's:\n%s\n---\n%s" % (layout, first[0], text, first[1]))
        if plan != first[2]:
            fail("%s's plan.json differs from %s's (path and SHA-256 aside)" % (layout, first[0]))
        if stages != first[3]:
            differ = [f for f in stages if stages[f] != first[3].get(f)]
            fail("%s's stage files %s differ from %s's: a weight was read otherwise" % (layout, differ, first[0]))
    print("%-18s %8s %8s %8s  %s" % ("layout", "bytes", "plan s", "verify s", "verify"))
    for layout, size, plan_seconds, verify_seconds, verdict in rows:
        print("%-18s %8d %8.1f %8.1f  %s" % (layout, size, plan_seconds, verify_seconds, verdict))
    print("OK: %d layouts: the same inspect report, the same plan, byte-identical stage files, verify passes"
          % len(rows))


def check_export(args, manifest):
    import torch
    sys.path.insert(0, MODELS)
    from export_tiny_attention import TinyAttention

    trained = manifest["layouts"][-1]  # 2.9's, the layout most unlike the seed's
    plan = os.path.join(args.out, trained.replace(".pt2", ""), "plan.json")
    with open(plan) as f:
        ranks = len(json.load(f)["ranks"])
    checkpoint = os.path.join(args.out, "checkpoint")
    shutil.rmtree(checkpoint, ignore_errors=True)
    run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", ranks, args.run, plan,
         "--steps", TRAIN_STEPS, "--loss", "cross_entropy", "--optimizer", "adam", "--lr", "0.01", "--save",
         checkpoint], timeout=300)
    expected = manifest["state_dict_names"]
    exported = {}
    for layout in manifest["layouts"]:
        output = os.path.join(args.out, "state_dict_%s.pt" % layout.replace(".pt2", ""))
        model = [] if layout == trained else ["--model", os.path.join(args.layouts, layout)]
        result, _ = run([args.partition, "export", checkpoint, "-o", output, *model])
        print("%s: %s" % (layout, result.stdout.strip()))
        state = torch.load(output)
        names = list(state)
        if sorted(names) != sorted(expected):
            fail("export against %s: state_dict names %s; the module's are %s (missing %s, extra %s)" % (
                layout, names, expected, sorted(set(expected) - set(names)), sorted(set(names) - set(expected))))
        if state["emb.weight"].data_ptr() != state["head.weight"].data_ptr():
            fail("export against %s: the tied emb.weight and head.weight are two tensors" % layout)
        module = TinyAttention()
        module.load_state_dict(state)  # strict
        exported[layout] = state
    first = manifest["layouts"][0]
    for layout, state in exported.items():
        if list(state) != list(exported[first]):
            fail("export against %s names %s, against %s %s" % (layout, list(state), first, list(exported[first])))
        for name, tensor in state.items():
            if not torch.equal(tensor, exported[first][name]):
                fail("export against %s: %s differs from the export against %s" % (layout, name, first))
    print("OK: export of the checkpoint after %d steps, against every layout: the module's %d state_dict names "
          "(emb.weight and head.weight one tensor), the same values, loaded strictly by the nn.Module"
          % (TRAIN_STEPS, len(expected)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition", required=True)
    parser.add_argument("--run", help="rannc-run: train and export a checkpoint too")
    parser.add_argument("--layouts", required=True, help="make_pt2_layouts.py's folder")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.out = os.path.abspath(args.out)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    with open(os.path.join(args.layouts, "manifest.json")) as f:
        manifest = json.load(f)
    check_layouts(args, manifest)
    if args.run:
        check_export(args, manifest)
    else:
        print("note: no --run (no rannc-run in this build): the checkpoint export is not checked")


if __name__ == "__main__":
    main()
