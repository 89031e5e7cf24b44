"""Tensor parallelism in plans: found in the graph, placed in one node, written, read back, refused by
the runtime where it cannot train it, and never faster when forced than when chosen.

usage: check_tensor_parallel.py RANNC RANNC_RUN SHAPE_ONLY_DIR SAMPLES_DIR

1. GPT 39B (shape-only, 48 layers, 64 heads) on 64 A100-80G, batch 512, bf16-mixed: the free plan
   splits layers (the model does not fit 64 devices' pipelines otherwise at speed); every stage
   with tensor_parallel has groups of `degree` consecutive ranks starting at a multiple of the
   degree inside one node, tensor_rank = place mod degree, two regions per layer it holds with
   their weights (QKV in 3 groups), sequence-parallel ops outside them, and `show` names the groups.
2. --tensor-parallel 1 plans no split; the forced layouts tp=1, 2, 4 and 8 (pp x dp x tp = 64),
   interleaved ones (vp=2, 3: pp x vp stages, stage s on the ranks of stage s mod pp) and
   --recompute full, none and selective are each no faster than the free plan, and force what
   they say. --attention fused writes "attention": "fused" (the free plan names none), and
   rannc-run refuses it and an --elementwise fused plan. With both kernels fused, the free plan is
   no slower than op by op, and no forced degree, chunk count or recomputation is faster.
3. A model without a splittable region (ResNet-50) plans byte for byte the same stages with
   --tensor-parallel 8 and 1.
4. A --plan-only plan of the shape-only ONNX model, interleaved or not, names each tensor rank's
   stage file without a SHA-256, and verify refuses it in one line: the files are not written
   (partition without --plan-only says in one line that the model has no weights to write them
   from). rannc-run refuses a fused-attention plan with one line saying so.
"""
import json
import os
import subprocess
import sys
import tempfile

LAYERS = 48  # GPT 39B


def run(command, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)


def plan(rannc, model, out, *extra):
    result = run([rannc, model, *extra, "--plan-only", "-o", out])
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(extra)}: exit {result.returncode}\n{result.stderr}")
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f)


def check_groups(plan_json):
    per_node = plan_json["cluster"]["gpus_per_node"]
    places = {r["rank"]: r for r in plan_json["ranks"]}
    split_stages = 0
    row_ops = set()
    for stage in plan_json["stages"]:
        split = stage.get("tensor_parallel")
        if not split:
            continue
        split_stages += 1
        degree, ranks = split["degree"], stage["ranks"]
        assert degree in (2, 4, 8), split
        assert len(ranks) == stage["replicas"] * degree, (len(ranks), stage["replicas"], degree)
        for start in range(0, len(ranks), degree):
            group = ranks[start:start + degree]
            assert group == list(range(group[0], group[0] + degree)), f"stage {stage['id']}: group {group} not consecutive"
            assert group[0] % degree == 0, f"stage {stage['id']}: group {group} not aligned"
            assert group[0] // per_node == group[-1] // per_node, f"stage {stage['id']}: group {group} spans nodes"
            for i, rank in enumerate(group):
                assert places[rank].get("tensor_rank", 0) == i, places[rank]
        # The last stage may hold only the LM head (split by vocabulary, no sequence-parallel op).
        last = stage["id"] == len(plan_json["stages"]) - 1
        assert split["regions"], f"stage {stage['id']} splits no region"
        names = {p["name"] for p in stage["params"]}
        for weight in split["weights"]:
            assert weight["name"] in names, weight
        check_vocabulary(stage, split, first=stage["id"] == 0, last=last)
        layer_regions = [r for r in split["regions"] if r.get("kind", "layer") == "layer"]
        grouped = [w for w in split["weights"] if w.get("groups") == 3]
        layers = {r["module"] for r in layer_regions if r.get("module")}
        # A fused QKV weight and bias in three groups for each attention region (every other one).
        assert abs(len(grouped) - len(layer_regions)) <= 2, (len(grouped), len(layer_regions))
        # Sequence parallelism: the norms, residual adds and biases between the regions.
        in_regions = {op for region in split["regions"] for op in region["ops"]}
        assert split["sequence_ops"] or last, f"stage {stage['id']}: no sequence-parallel op"
        assert not in_regions & set(split["sequence_ops"]), "an op both in a region and sequence-parallel"
        assert set(split["sequence_ops"]) <= set(stage["ops"])
        for region in layer_regions:
            assert region["row_op"] not in row_ops, f"region of op {region['row_op']} in two stages"
            assert set(region["column_ops"]) <= set(stage["ops"]) and region["row_op"] in stage["ops"]
            row_ops.add(region["row_op"])
        assert not layers or len(layers) == len(layer_regions), layers
    # Two regions a layer (attention and MLP), each in one stage, when every stage splits.
    if split_stages == len(plan_json["stages"]):
        assert len(row_ops) == 2 * LAYERS, len(row_ops)
    return split_stages


def check_vocabulary(stage, split, first, last):
    """The tied table splits by rows (its 51200-word vocabulary) in the token lookup of the first
    stage and in the LM head of the last, whose logits stay split: no row op."""
    kinds = [r.get("kind", "layer") for r in split["regions"]]
    assert kinds.count("vocabulary_embedding") == (1 if first else 0), (stage["id"], kinds)
    assert kinds.count("vocabulary_head") == (1 if last else 0), (stage["id"], kinds)
    for region in split["regions"]:
        if region.get("kind") == "vocabulary_head":
            assert "row_op" not in region and set(region["column_ops"]) <= set(region["ops"]), region
        if region.get("kind") == "vocabulary_embedding":
            assert region["column_ops"] == [region["row_op"]] == region["ops"], region
    if first or last:
        table = [w for w in split["weights"] if w["name"] == "embeddings.word.weight"]
        assert table == [{"name": "embeddings.word.weight", "dim": 0}], split["weights"]


NOT_WRITTEN = "is missing (write the stage files with the partition verb)"


def check_unwritten_rank_files(rannc, out, plan_json):
    """A --plan-only plan names each tensor rank's stage file it would write, without a SHA-256, and
    verify refuses it in one line: its files are not written."""
    for stage in plan_json["stages"]:
        split = stage["tensor_parallel"]
        files = split.get("files", [])
        assert [f["file"] for f in files] == [f"stage_{stage['id']}_tp{r}.pt" for r in range(split["degree"])], files
        assert not any("sha256" in f for f in files), files
    refused = run([rannc, "verify", os.path.join(out, "plan.json")])
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and len(lines) == 1 and NOT_WRITTEN in lines[0], refused.stderr


def refused_once(rannc_run, out, why):
    refused = run([rannc_run, os.path.join(out, "plan.json")])
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and any(why in line for line in lines), refused.stderr
    print("rannc-run: " + [line for line in lines if why in line][0])


def main():
    rannc, rannc_run, shape_only, samples = sys.argv[1:5]
    gpt = os.path.join(shape_only, "gpt-39b.onnx")
    common = ["--gpus", "64", "--batch", "512", "--precision", "bf16-mixed"]
    with tempfile.TemporaryDirectory() as out:
        free = plan(rannc, gpt, out, *common)
        split_stages = check_groups(free)
        assert split_stages > 0, "the free plan of GPT 39B on 64 devices splits no layer"
        free_ms = free["predicted"]["iteration_ms"]
        shown = run([rannc, "show", os.path.join(out, "plan.json")]).stdout
        assert "x tp " in shown and "regions split" in shown, shown
        print(f"free: {split_stages} of {len(free['stages'])} stages split, step {free_ms:.1f} ms")


        none = plan(rannc, gpt, out, *common, "--tensor-parallel", "1")
        assert not any("tensor_parallel" in s for s in none["stages"])
        assert none["predicted"]["iteration_ms"] >= free_ms * (1 - 1e-9), (none["predicted"]["iteration_ms"], free_ms)
        print(f"--tensor-parallel 1: step {none['predicted']['iteration_ms']:.1f} ms")

        for tp, pp, dp in ((1, 8, 8), (2, 8, 4), (4, 8, 2), (8, 8, 1), (8, 4, 2)):
            forced = plan(rannc, gpt, out, *common, "--layout", f"pp={pp},dp={dp},tp={tp}")
            degrees = {s.get("tensor_parallel", {}).get("degree", 1) for s in forced["stages"]}
            assert degrees == {tp}, (tp, degrees)
            assert len(forced["stages"]) == pp and forced["batch"]["pipelines"] == dp
            check_groups(forced)
            step = forced["predicted"]["iteration_ms"]
            assert step >= free_ms * (1 - 1e-9), f"forced pp={pp},dp={dp},tp={tp} simulates {step} < free {free_ms}"
            print(f"pp={pp} dp={dp} tp={tp}: step {step:.1f} ms ({step / free_ms:.2f}x the free plan)")
        # The tensor ranks' stage files are named, not written: a shape-only model has no weights.
        check_unwritten_rank_files(rannc, out, forced)
        unwritable = run([rannc, gpt, *common, "--layout", "pp=8,dp=4,tp=2", "-o", os.path.join(out, "weights")])
        lines = unwritable.stderr.strip().splitlines()
        assert unwritable.returncode != 0 and len(lines) == 1 and "plan with --plan-only" in lines[0], unwritable.stderr
        print("partition without --plan-only: " + lines[0])

        for pp, dp, tp, vp in ((8, 1, 8, 2), (4, 2, 8, 3), (8, 2, 4, 2)):
            forced = plan(rannc, gpt, out, *common, "--layout", f"pp={pp},dp={dp},tp={tp},vp={vp}")
            stages = forced["stages"]
            assert forced.get("interleave") == vp and len(stages) == pp * vp, (forced.get("interleave"), len(stages))
            for stage in stages[pp:]:
                assert stage["ranks"] == stages[stage["id"] % pp]["ranks"], f"stage {stage['id']} off its group's ranks"
            assert forced["batch"]["microbatches"] % pp == 0, forced["batch"]
            check_groups(forced)
            step = forced["predicted"]["iteration_ms"]
            assert step >= free_ms * (1 - 1e-9), f"forced pp={pp},dp={dp},tp={tp},vp={vp} simulates {step} < free {free_ms}"
            print(f"pp={pp} dp={dp} tp={tp} vp={vp}: step {step:.1f} ms ({step / free_ms:.2f}x the free plan)")
        # rannc-run trains interleaved plans (tests/runtime); this one's files are not written.
        check_unwritten_rank_files(rannc, out, forced)

        written = {"full": True, "none": False, "selective": "selective"}
        for recompute in ("full", "none", "selective"):
            forced = plan(rannc, gpt, out, *common, "--recompute", recompute)
            assert all(s["recompute"] == written[recompute] for s in forced["stages"]), recompute
            step = forced["predicted"]["iteration_ms"]
            assert step >= free_ms * (1 - 1e-9), f"--recompute {recompute} simulates {step} < free {free_ms}"
            print(f"--recompute {recompute}: step {step:.1f} ms ({step / free_ms:.2f}x the free plan)")

        # Without tensor parallelism or interleaving, so that fused attention is what rannc-run refuses.
        assert "attention" not in free, free.get("attention")
        fused = plan(rannc, gpt, out, *common, "--attention", "fused", "--layout", "pp=8,dp=8,tp=1")
        assert fused.get("attention") == "fused", fused.get("attention")
        assert "interleave" not in fused and not any("tensor_parallel" in s for s in fused["stages"])
        print(f"--attention fused, pp=8 dp=8 tp=1: step {fused['predicted']['iteration_ms']:.1f} ms")
        refused_once(rannc_run, out, "planned for fused attention kernels (--attention fused)")
        elementwise = plan(rannc, gpt, out, *common, "--elementwise", "fused", "--layout", "pp=8,dp=8,tp=1")
        assert elementwise.get("elementwise") == "fused", elementwise.get("elementwise")
        refused_once(rannc_run, out, "planned for fused elementwise kernels (--elementwise fused)")

        # For a stack with fused kernels the search is as good: no forced degree, chunk count or
        # recomputation simulates faster, and fusing never makes the chosen step longer.
        kernels = ["--attention", "fused", "--elementwise", "fused"]
        fused_free = plan(rannc, gpt, out, *common, *kernels)
        fused_ms = fused_free["predicted"]["iteration_ms"]
        assert fused_ms <= free_ms * (1 + 1e-9), f"fused kernels make the free step longer: {fused_ms} > {free_ms}"
        print(f"fused kernels, free: step {fused_ms:.1f} ms ({free_ms / fused_ms:.2f}x faster than op by op)")
        for forcing in (["--layout", "pp=8,dp=4,tp=2"], ["--layout", "pp=4,dp=2,tp=8,vp=3"],
                        ["--layout", "pp=8,dp=2,tp=4"], ["--recompute", "none"], ["--recompute", "selective"]):
            forced = plan(rannc, gpt, out, *common, *kernels, *forcing)
            step = forced["predicted"]["iteration_ms"]
            assert step >= fused_ms * (1 - 1e-9), f"fused, {' '.join(forcing)} simulates {step} < free {fused_ms}"
            print(f"fused kernels, {' '.join(forcing)}: step {step:.1f} ms ({step / fused_ms:.2f}x the free plan)")

        cnn = os.path.join(samples, "resnet50.onnx")
        one = plan(rannc, cnn, out, "--gpus", "8", "--tensor-parallel", "1")
        eight = plan(rannc, cnn, out, "--gpus", "8", "--tensor-parallel", "8")
        assert json.dumps(one["stages"]) == json.dumps(eight["stages"]), "a model without regions planned differently"
        assert json.dumps(one["predicted"]) == json.dumps(eight["predicted"])
        print("resnet50: the same plan with --tensor-parallel 8 and 1")
    print("PASS")


if __name__ == "__main__":
    main()
