#!/usr/bin/python3
"""Writes the seed inputs of the fuzzer and the hostile-input cases into OUT:

  mlp.pt, mlp.onnx        a traced 8-16-4 MLP (input x, batch dim first) and its ONNX export
  conv.onnx               x[batch,3,8,8] -> Conv(4,3x3) -> Relu -> Flatten, built with onnx.helper
  cluster.json            a valid cluster description (1 node of 2 H100s with both links)
  mixed_cluster.json      a mixed one: a node of 2 A100 40GB and a node of 2 H100s
  profile_db.json         `rannc-partition profile mlp.pt` output (one rep)
  plan1/plan.json         a 1-rank plan of mlp.pt with its stage file (what rannc-run -np 1 runs)
  plan2/plan.json         a 2-stage plan of mlp.pt on 2 devices with its stage files
  plan4/plan.json         a 1-stage plan of mlp.pt on mixed_cluster.json (node groups, each rank's device)
  bags.pt                 a traced EmbeddingBag(50, 4) and Linear(4, 2) (input ids[batch, 3])
  plan3/plan.json         its sharded plan on 2 devices (--plan-only: a sharding section)
  pt2/tiny_attention.pt2  tests/models/pt2/tiny_attention.pt2 (torch.export, PyTorch 2.6's layout)
  pt2/v29.pt2             the same as the PT2 archive of PyTorch 2.9 (raw weights and their config)
  plan5/plan.json         a plan of pt2/tiny_attention.pt2 splitting its sequences over 2 devices
                          (context_parallel, each rank's context_rank)

usage: make_seeds.py --rannc BIN --out DIR
Run with /usr/bin/python3 (the interpreter with torch and onnx).
"""
import argparse
import json
import os
import subprocess
import sys

OPSET = 17
X_ARG = "x:4x8:float32"


def wrap(layers):
    """`layers` as the submodule `layers` of a module whose forward takes one input named x."""
    import torch.nn as nn

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x):
            return self.layers(x)

    return Wrapped()


def write_mlp(out):
    import onnx
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).train()
    wrapped = wrap(model).train()
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    torch.jit.trace(wrapped, (x,)).save(os.path.join(out, "mlp.pt"))
    onnx_path = os.path.join(out, "mlp.onnx")
    torch.onnx.export(wrapped, (x,), onnx_path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    onnx.checker.check_model(onnx_path)


def write_bags(out):
    import torch
    import torch.nn as nn

    class Bags(nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = nn.EmbeddingBag(50, 4, mode="sum")
            self.head = nn.Linear(4, 2)

        def forward(self, ids):
            return self.head(self.bag(ids))

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (4, 3), generator=torch.Generator().manual_seed(1))
    torch.jit.trace(Bags().train(), (ids,)).save(os.path.join(out, "bags.pt"))


def conv_model(strides=(1, 1), batch="batch"):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3],
                              strides=list(strides), pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["y"], name="flatten", axis=1)]
    graph = helper.make_graph(nodes, "conv",
                              inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 256])],
                              initializer=[weight, bias])
    return helper.make_model(graph, producer_name="rannc-fuzz", opset_imports=[helper.make_opsetid("", OPSET)])


def write_conv(out):
    import onnx
    model = conv_model()
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "conv.onnx"))


CLUSTER = {"nodes": 1, "gpus_per_node": 2, "device": "h100-80g", "mem": "80G",
           "intra_node": {"bandwidth_gbps": 450, "latency_us": 3},
           "inter_node": {"bandwidth_gbps": 50, "latency_us": 5}}
MIXED_CLUSTER = {"gpus_per_node": 2, "inter_node": {"bandwidth_gbps": 25, "latency_us": 5},
                 "node_groups": [{"nodes": 1, "device": "a100-40g", "mem": "40G"},
                                 {"nodes": 1, "device": "h100-80g", "host": {"mem": "1T"}}]}


def run(command):
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit("FAILED: %s\nexit %d\n%s%s" % (" ".join(command), result.returncode, result.stdout, result.stderr))


PT2_SEED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "pt2",
                        "tiny_attention.pt2")


def write_pt2(out):
    """The .pt2 seeds (pt2/): the committed PyTorch 2.6 export and its PT2 archive of 2.9."""
    import shutil
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models"))
    import make_pt2_layouts
    folder = os.path.join(out, "pt2")
    os.makedirs(folder, exist_ok=True)
    shutil.copy(PT2_SEED, os.path.join(folder, "tiny_attention.pt2"))
    make_pt2_layouts.main(["--seed", PT2_SEED, "--out", os.path.join(folder, "layouts")])
    shutil.copy(os.path.join(folder, "layouts", "v29.pt2"), os.path.join(folder, "v29.pt2"))


def write_context_plan(rannc, out):
    run([rannc, os.path.join(out, "pt2", "tiny_attention.pt2"), "--gpus", "2", "--layout", "pp=1,dp=1,cp=2", "-o",
         os.path.join(out, "plan5")])


def write_all(rannc, out):
    os.makedirs(out, exist_ok=True)
    write_mlp(out)
    write_conv(out)
    with open(os.path.join(out, "cluster.json"), "w") as f:
        json.dump(CLUSTER, f, indent=1)
    with open(os.path.join(out, "mixed_cluster.json"), "w") as f:
        json.dump(MIXED_CLUSTER, f, indent=1)
    db = os.path.join(out, "profile_db.json")
    if os.path.exists(db):
        os.remove(db)
    mlp = os.path.join(out, "mlp.pt")
    run([rannc, "profile", mlp, "--input", X_ARG, "--profile-db", db, "--reps", "1"])
    run([rannc, mlp, "--input", X_ARG, "--gpus", "1", "-o", os.path.join(out, "plan1")])
    run([rannc, mlp, "--input", X_ARG, "--gpus", "2", "--stages", "2", "-o", os.path.join(out, "plan2")])
    run([rannc, mlp, "--input", X_ARG, "--cluster", os.path.join(out, "mixed_cluster.json"), "--stages", "1",
         "-o", os.path.join(out, "plan4")])
    write_bags(out)
    run([rannc, os.path.join(out, "bags.pt"), "--input", "ids:4x3:int64", "--gpus", "2", "--plan-only", "-o",
         os.path.join(out, "plan3")])
    write_pt2(out)
    write_context_plan(rannc, out)
    for name in ("plan1", "plan2", "plan3", "plan4", "plan5"):
        if not os.path.exists(os.path.join(out, name, "plan.json")):
            sys.exit("FAILED: no %s/plan.json" % name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rannc", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    write_all(os.path.abspath(args.rannc), os.path.abspath(args.out))
    print("ok: fuzz seeds in", args.out)


if __name__ == "__main__":
    main()
