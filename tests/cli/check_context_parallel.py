"""Context parallelism in plans: searched only when asked, placed in one node or over whole nodes
around the tensor groups, written and read back, never faster when forced than when chosen,
refused by the runtime.

usage: check_context_parallel.py RANNC RANNC_RUN SHAPE_ONLY_DIR SAMPLES_DIR

1. Llama-3 70B (shape-only, 8192 positions) on 64 H100-80G, batch 128, bf16-mixed, fused kernels,
   --context-parallel 8: the free plan splits sequences on every stage; each replica's group is
   tensor_parallel.degree x context_parallel.degree consecutive ranks starting at a multiple of
   its size, in one node or over whole nodes, tensor ranks within context ranks; `show` names
   the groups.
2. Without --context-parallel no stage has context_parallel, byte for byte the plan of
   --context-parallel 1 (but the command line).
3. Forced layouts (NeMo's tp=4 cp=2 vp=5, tp=2 cp=4, tp=1 cp=8, and over two nodes tp=8 cp=2
   and tp=4 cp=4 vp=5) force what they say and are no faster than the free plan.
4. A model that keeps its sequences (BERT's pooler) refuses --layout cp= in one line, exit 1.
5. rannc-run refuses a plan with context parallelism (the GPT sample on the cpu device) in one line.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FUSED = ["--device", "h100-80g", "--precision", "bf16-mixed", "--attention", "fused", "--elementwise", "fused"]


from plan_runs import write_plan


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def plan(rannc, model, out, *extra):
    """A --plan-only plan, checked against the schema."""
    return write_plan(rannc, model, out, [*extra, "--plan-only"])


def check_groups(plan_json):
    """Every stage's groups: t x c consecutive ranks, aligned, in one node or over whole nodes,
    tensor ranks inside context ranks. Returns the context degrees of the stages."""
    per_node = plan_json["cluster"]["gpus_per_node"]
    places = {r["rank"]: r for r in plan_json["ranks"]}
    degrees = []
    for stage in plan_json["stages"]:
        t = stage.get("tensor_parallel", {}).get("degree", 1)
        c = stage.get("context_parallel", {}).get("degree", 1)
        degrees.append(c)
        ranks, size = stage["ranks"], t * c
        assert len(ranks) == stage["replicas"] * size, (stage["id"], len(ranks), stage["replicas"], t, c)
        for start in range(0, len(ranks), size):
            group = ranks[start:start + size]
            assert group == list(range(group[0], group[0] + size)), f"stage {stage['id']}: group {group} not consecutive"
            in_a_node = group[0] // per_node == group[-1] // per_node
            assert group[0] % size == 0 and (in_a_node or size % per_node == 0), group
            for i, rank in enumerate(group):
                place = places[rank]  # placed by its device group's first stage when interleaved
                assert place["replica"] % size == i, place
                assert place.get("tensor_rank", 0) == i % t, place
                assert place.get("context_rank", 0) == i // t % c, place
    return degrees


def main():
    rannc, rannc_run, shape_only, samples = sys.argv[1:5]
    llama = os.path.join(shape_only, "llama3-70b.onnx")
    common = ["--gpus", "64", "--batch", "128", *FUSED]
    with tempfile.TemporaryDirectory() as out:
        free_dir = os.path.join(out, "free")
        free = plan(rannc, llama, free_dir, *common, "--context-parallel", "8")
        degrees = check_groups(free)
        assert all(c > 1 for c in degrees), degrees
        free_ms = free["predicted"]["iteration_ms"]
        shown = run([rannc, "show", os.path.join(free_dir, "plan.json")])
        assert shown.returncode == 0 and f" x cp {degrees[0]}" in shown.stdout, shown.stdout
        as_json = json.loads(run([rannc, "show", "--json", os.path.join(free_dir, "plan.json")]).stdout)
        assert as_json["stages"][0]["context_parallel"] == {"degree": degrees[0]}, as_json["stages"][0]
        print(f"free, --context-parallel 8: {free_ms / 1e3:.3f} s, cp {degrees[0]}, {len(free['stages'])} stages")

        # Not asked: none, as with --context-parallel 1.
        plain_dir, one_dir = os.path.join(out, "plain"), os.path.join(out, "one")
        plain = plan(rannc, llama, plain_dir, *common)
        one = plan(rannc, llama, one_dir, *common, "--context-parallel", "1")
        assert not any("context_parallel" in s for s in plain["stages"])
        plain.pop("generator"), one.pop("generator")
        assert plain == one, "--context-parallel 1 changed the plan"
        assert plain["predicted"]["iteration_ms"] > free_ms, "the plan without context parallelism is not slower"
        print(f"without: {plain['predicted']['iteration_ms'] / 1e3:.3f} s")

        # The last two span nodes of 8: context groups of 16 devices, over 2 nodes.
        for layout, t, c in (("pp=4,dp=2,tp=4,cp=2,vp=5,m=64", 4, 2), ("pp=8,dp=1,tp=2,cp=4,m=128", 2, 4),
                             ("pp=8,dp=1,tp=1,cp=8,m=128", 1, 8), ("pp=4,dp=1,tp=8,cp=2,m=128", 8, 2),
                             ("pp=4,dp=1,tp=4,cp=4,vp=5,m=128", 4, 4)):
            forced_dir = os.path.join(out, layout.replace(",", "_"))
            result = run([rannc, llama, *common, "--context-parallel", "8", "--layout", layout, "--plan-only", "-o",
                          forced_dir])
            if result.returncode == 1:
                print(f"{layout}: does not fit")
                continue
            assert result.returncode == 0, result.stderr
            with open(os.path.join(forced_dir, "plan.json")) as f:
                forced = json.load(f)
            assert check_groups(forced) == [c] * len(forced["stages"]), layout
            assert all(s.get("tensor_parallel", {}).get("degree", 1) == t for s in forced["stages"]), layout
            forced_ms = forced["predicted"]["iteration_ms"]
            print(f"{layout}: {forced_ms / 1e3:.3f} s")
            assert forced_ms >= free_ms * (1 - 1e-9), f"{layout} is faster than the free plan"

        refused = run([rannc, os.path.join(shape_only, "bert-large.onnx"), "--gpus", "8", "--device", "a100-80g",
                       "--layout", "pp=1,dp=4,cp=2", "--plan-only", "-o", os.path.join(out, "bert")])
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 1 and len(lines) == 1, refused.stderr
        assert "context parallelism of 2: the model cannot split its sequences: " in lines[0], lines[0]
        assert "moves data across positions of the sequence" in lines[0], lines[0]

        cpu_dir = os.path.join(out, "cpu")
        result = run([rannc, os.path.join(samples, "gpt.onnx"), "--batch", "8", "--gpus", "4", "--device", "cpu",
                      "--layout", "pp=1,dp=2,cp=2", "-o", cpu_dir])
        assert result.returncode == 0, result.stderr
        refused = run([rannc_run, os.path.join(cpu_dir, "plan.json")])
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode != 0 and len(lines) == 1, refused.stderr
        assert "splits each sample's positions over 2 devices (context parallelism), which rannc-run does not run" in \
            lines[0], lines[0]
    print("OK: context parallelism searched when asked, placed in a node or over whole nodes, never faster forced, "
          "refused by rannc-run")


if __name__ == "__main__":
    main()
