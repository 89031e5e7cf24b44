"""ONNX ops mapped to TorchScript, checked against an independent reference.

Each case writes a small ONNX model, partitions it (`--device cpu --gpus 2`, forced into 2 stages
where the model has room), runs `verify` (stages against the unpartitioned model as one generated
stage: the same mapping on both sides), and then checks the mapping itself: the stage files,
chained from plan.json alone, against PyTorch's own module (for torch.onnx.export'ed cases:
outputs, the gradient of every float input and of every parameter torch names alike) or
against a NumPy transcription of the ONNX operator definition (for hand-made cases that
torch never exports: GRU with linear_before_reset=0, LSTM in reverse or batch-first layout,
Slice bounds computed at run time, CumSum exclusive/reverse).

usage: check_onnx_ops.py RANNC OUT_DIR CASE   (CASE: one of CASES below, or "all")
"""
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn as nn
from onnx import TensorProto, helper, numpy_helper

from plan_runs import fail, max_rel, verify, write_plan

OPSET = 14
BATCH = 8
TOLERANCE = 1e-5


def rel(value, want):
    value, want = np.asarray(value, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if value.shape != want.shape:
        fail(f"shape {value.shape}, expected {want.shape}")
    if not np.isfinite(value).all():
        fail("not finite")
    return float(np.abs(value - want).max() / max(np.abs(want).max(), 1e-30)) if want.size else 0.0


# ---------------------------------------------------------------------------------------------
# Models exported from PyTorch
# ---------------------------------------------------------------------------------------------

class ConvTransposeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.mix = nn.ConvTranspose2d(4, 6, (2, 3), stride=(1, 2), dilation=(2, 1), groups=2, bias=False)
        self.line = nn.ConvTranspose1d(6, 2, 4, stride=3, padding=2)

    def forward(self, x):
        y = self.mix(torch.relu(self.up(x)))
        return self.line(y.mean(2))


class TriluNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 6)

    def forward(self, x):
        h = self.proj(x)
        return torch.triu(h, 1) + 2 * torch.tril(h, -2) + torch.triu(h.transpose(1, 2)) * torch.tril(h, 0)


class CumSumNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 5)

    def forward(self, x):
        h = self.proj(x)
        return torch.cumsum(h, 1) + torch.cumsum(torch.tanh(h), -1)


class LstmNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 7, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(14, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.head(y), h.sum(0) * c.sum(0)


class GruNet(nn.Module):
    """A GRU whose initial state is computed from the input (so it carries the batch)."""

    def __init__(self):
        super().__init__()
        self.start = nn.Linear(5, 6)
        self.gru = nn.GRU(5, 6, bidirectional=True, batch_first=True)
        self.gru2 = nn.GRU(12, 4, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h0 = torch.tanh(self.start(x.mean(1))).unsqueeze(0).repeat(2, 1, 1)
        y, h = self.gru(x, h0)
        y2, _ = self.gru2(y)
        return self.head(y2), h


class SliceNet(nn.Module):
    """Slices with a step, a flip (ONNX Slice with step -1), and an end computed from the shape."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(9, 9)

    def forward(self, x):
        h = self.proj(x)
        half = h.size(1) // 2
        a = h[:, 1:-1:2, ::3]
        b = torch.flip(h, [1, 2])[:, :half]
        return a.sum(1) + b.sum(1)[:, ::3], h[:, half:, 2:7]


TORCH_CASES = {
    "conv_transpose": (ConvTransposeNet, [("x", [BATCH, 3, 6, 7])]),
    "trilu": (TriluNet, [("x", [BATCH, 6, 6])]),
    "cumsum": (CumSumNet, [("x", [BATCH, 4, 5])]),
    "lstm": (LstmNet, [("x", [BATCH, 4, 5])]),
    "gru": (GruNet, [("x", [BATCH, 4, 5])]),
    "slice": (SliceNet, [("x", [BATCH, 6, 9])]),
}


def export_torch_case(name, path):
    torch.manual_seed(0)
    model = TORCH_CASES[name][0]().train()
    inputs = tuple(torch.randn(shape) for _, shape in TORCH_CASES[name][1])
    input_names = [n for n, _ in TORCH_CASES[name][1]]
    with torch.no_grad():
        outputs = model(*inputs)
    output_names = ["out%d" % i for i in range(len(outputs) if isinstance(outputs, tuple) else 1)]
    torch.onnx.export(model, inputs, path, input_names=input_names, output_names=output_names,
                      dynamic_axes={n: {0: "batch"} for n in input_names}, opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return model


# ---------------------------------------------------------------------------------------------
# Hand-made ONNX models and their NumPy references
# ---------------------------------------------------------------------------------------------

def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def onnx_lstm(X, W, R, B, h0, c0, direction, layout):
    """ONNX LSTM (default activations): gates i, o, f, c."""
    if layout == 1:
        X = X.transpose(1, 0, 2)
        h0, c0 = (None if h0 is None else h0.transpose(1, 0, 2)), (None if c0 is None else c0.transpose(1, 0, 2))
    seq, batch, _ = X.shape
    dirs, hidden = W.shape[0], R.shape[2]
    Y = np.zeros((seq, dirs, batch, hidden))
    Yh, Yc = np.zeros((dirs, batch, hidden)), np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        backward = direction == "reverse" or d == 1
        h = np.zeros((batch, hidden)) if h0 is None else h0[d]
        c = np.zeros((batch, hidden)) if c0 is None else c0[d]
        b = np.zeros(8 * hidden) if B is None else B[d]
        for t in (reversed(range(seq)) if backward else range(seq)):
            g = X[t] @ W[d].T + h @ R[d].T + b[:4 * hidden] + b[4 * hidden:]
            i, o, f, cc = np.split(g, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
            h = sigmoid(o) * np.tanh(c)
            Y[t, d] = h
        Yh[d], Yc[d] = h, c
    if layout == 1:
        return Y.transpose(2, 0, 1, 3), Yh.transpose(1, 0, 2), Yc.transpose(1, 0, 2)
    return Y, Yh, Yc


def onnx_gru(X, W, R, B, h0, direction, linear_before_reset):
    """ONNX GRU (default activations, layout 0): gates z, r, h."""
    seq, batch, _ = X.shape
    dirs, hidden = W.shape[0], R.shape[2]
    Y, Yh = np.zeros((seq, dirs, batch, hidden)), np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        backward = direction == "reverse" or d == 1
        h = np.zeros((batch, hidden)) if h0 is None else h0[d]
        wb, rb = np.split(np.zeros(6 * hidden) if B is None else B[d], 2)
        Wz, Wr, Wh = np.split(W[d], 3)
        Rz, Rr, Rh = np.split(R[d], 3)
        wbz, wbr, wbh = np.split(wb, 3)
        rbz, rbr, rbh = np.split(rb, 3)
        for t in (reversed(range(seq)) if backward else range(seq)):
            x = X[t]
            z = sigmoid(x @ Wz.T + h @ Rz.T + wbz + rbz)
            r = sigmoid(x @ Wr.T + h @ Rr.T + wbr + rbr)
            if linear_before_reset:
                n = np.tanh(x @ Wh.T + r * (h @ Rh.T + rbh) + wbh)
            else:
                n = np.tanh(x @ Wh.T + (r * h) @ Rh.T + rbh + wbh)
            h = (1 - z) * n + z * h
            Y[t, d] = h
        Yh[d] = h
    return Y, Yh


def onnx_slice(x, starts, ends, axes, steps):
    index = [slice(None)] * x.ndim
    for s, e, a, p in zip(starts, ends, axes, steps):
        n = x.shape[a]
        if p < 0:  # NumPy reads -1 as "the last"; ONNX's clamp to -1 means "before the first"
            s = min(max(s + n if s < 0 else s, 0), n - 1)
            e = min(max(e + n if e < 0 else e, -1), n - 1)
            index[a] = slice(s, e if e >= 0 else None, p)
        else:
            index[a] = slice(s, e, p)
    return x[tuple(index)]


def onnx_cumsum(x, axis, exclusive, reverse):
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis)
    if exclusive:
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis)), np.take(y, range(y.shape[axis] - 1), axis)], axis)
    return np.flip(y, axis) if reverse else y


def weight(name, shape, rng, scale=0.5):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def finish(nodes, inputs, outputs, initializers, path):
    """Checks and saves a hand-made model of the default opset."""
    graph = helper.make_graph(nodes, "case", inputs=inputs, outputs=outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def hand_lstm(path):
    """Reverse LSTM in layout 1 (batch first) with initial states as inputs, then one forward."""
    rng = np.random.default_rng(1)
    hidden, size, seq = 4, 3, 5
    w = {"W": weight("W", (1, 4 * hidden, size), rng), "R": weight("R", (1, 4 * hidden, hidden), rng),
         "B": weight("B", (1, 8 * hidden), rng), "W2": weight("W2", (2, 4 * hidden, hidden), rng),
         "R2": weight("R2", (2, 4 * hidden, hidden), rng)}
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "yh", "yc"], hidden_size=hidden,
                              direction="reverse", layout=1, name="lstm_reverse"),
             helper.make_node("Squeeze", ["y", "axis2"], ["ys"]),
             helper.make_node("LSTM", ["ys", "W2", "R2"], ["y2", "yh2"], hidden_size=hidden, direction="bidirectional",
                              layout=1, name="lstm_bidirectional")]
    axis2 = numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, size]),
              helper.make_tensor_value_info("h0", TensorProto.FLOAT, ["batch", 1, hidden]),
              helper.make_tensor_value_info("c0", TensorProto.FLOAT, ["batch", 1, hidden])]
    outputs = [helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", seq, 2, hidden]),
               helper.make_tensor_value_info("yh2", TensorProto.FLOAT, ["batch", 2, hidden]),
               helper.make_tensor_value_info("yc", TensorProto.FLOAT, ["batch", 1, hidden])]
    finish(nodes, inputs, outputs, list(w.values()) + [axis2], path)
    arrays = {k: numpy_helper.to_array(v).astype(np.float64) for k, v in w.items()}

    def reference(x, h0, c0):
        y, _, yc = onnx_lstm(x, arrays["W"], arrays["R"], arrays["B"], h0, c0, "reverse", 1)
        y2, yh2, _ = onnx_lstm(y[:, :, 0], arrays["W2"], arrays["R2"], None, None, None, "bidirectional", 1)
        return [y2, yh2, yc]
    return reference


def hand_gru(path):
    """GRU with linear_before_reset=0 (the ONNX default) in both directions, then with 1 in reverse."""
    rng = np.random.default_rng(2)
    hidden, size, seq = 4, 3, 5
    w = {"W": weight("W", (2, 3 * hidden, size), rng), "R": weight("R", (2, 3 * hidden, hidden), rng),
         "B": weight("B", (2, 6 * hidden), rng), "W2": weight("W2", (1, 3 * hidden, 2 * hidden), rng),
         "R2": weight("R2", (1, 3 * hidden, hidden), rng), "B2": weight("B2", (1, 6 * hidden), rng)}
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
             helper.make_node("GRU", ["xt", "W", "R", "B"], ["y", "yh"], hidden_size=hidden, direction="bidirectional",
                              name="gru_reset_first"),
             helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["yt", "shape"], ["y2in"]),
             helper.make_node("GRU", ["y2in", "W2", "R2", "B2"], ["y2", "yh2"], hidden_size=hidden, direction="reverse",
                              linear_before_reset=1, name="gru_linear_first"),
             helper.make_node("Transpose", ["y2"], ["out"], perm=[2, 0, 1, 3]),
             helper.make_node("Transpose", ["yh"], ["hout"], perm=[1, 0, 2])]
    shape = numpy_helper.from_array(np.array([seq, -1, 2 * hidden], dtype=np.int64), "shape")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, size])]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", seq, 1, hidden]),
               helper.make_tensor_value_info("hout", TensorProto.FLOAT, ["batch", 2, hidden])]
    finish(nodes, inputs, outputs, list(w.values()) + [shape], path)
    a = {k: numpy_helper.to_array(v).astype(np.float64) for k, v in w.items()}

    def reference(x):
        y, yh = onnx_gru(x.transpose(1, 0, 2), a["W"], a["R"], a["B"], None, "bidirectional", 0)
        y2in = y.transpose(0, 2, 1, 3).reshape(seq, -1, 2 * hidden)
        y2, _ = onnx_gru(y2in, a["W2"], a["R2"], a["B2"], None, "reverse", 1)
        return [y2.transpose(2, 0, 1, 3), yh.transpose(1, 0, 2)]
    return reference


SLICES = [  # starts, ends, axes, steps: all four computed at run time
    ([1, -1], [5, 0], [2, 1], [2, -1]),
    ([-1, 0], [-(2**63 - 1), 9], [-1, 1], [-3, 4]),
]


def hand_slice(path):
    """Slices whose starts, ends, axes and steps are computed (Identity of constants), so the
    mapping reads them at run time; negative steps and bounds clamped from both ends."""
    rng = np.random.default_rng(3)
    w = weight("w", (7,), rng)
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"])]
    inits = [w]
    outputs = []
    for k, bounds in enumerate(SLICES):
        names = []
        for what, values in zip(("starts", "ends", "axes", "steps"), bounds):
            inits.append(numpy_helper.from_array(np.array(values, dtype=np.int64), f"{what}{k}_c"))
            nodes.append(helper.make_node("Identity", [f"{what}{k}_c"], [f"{what}{k}"]))
            names.append(f"{what}{k}")
        nodes.append(helper.make_node("Slice", ["h"] + names, [f"s{k}"], name=f"slice{k}"))
        nodes.append(helper.make_node("Tanh", [f"s{k}"], [f"out{k}"]))
        outputs.append(helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, ["batch", "a%d" % k, "b%d" % k]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, 7])]
    finish(nodes, inputs, outputs, inits, path)
    wa = numpy_helper.to_array(w).astype(np.float64)
    return lambda x: [np.tanh(onnx_slice(x * wa, *bounds)) for bounds in SLICES]


CUMSUMS = [(1, 1, 0), (2, 0, 1), (-1, 1, 1)]  # axis, exclusive, reverse


def hand_cumsum(path):
    rng = np.random.default_rng(4)
    w = weight("w", (5,), rng)
    nodes = [helper.make_node("Mul", ["x", "w"], ["h"])]
    inits = [w]
    outputs = []
    for k, (axis, exclusive, reverse) in enumerate(CUMSUMS):
        inits.append(numpy_helper.from_array(np.array(axis, dtype=np.int32), f"axis{k}"))
        nodes.append(helper.make_node("CumSum", ["h", f"axis{k}"], [f"c{k}"], exclusive=exclusive, reverse=reverse))
        nodes.append(helper.make_node("Tanh", [f"c{k}"], [f"out{k}"]))
        outputs.append(helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, ["batch", 4, 5]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 5])]
    finish(nodes, inputs, outputs, inits, path)
    wa = numpy_helper.to_array(w).astype(np.float64)
    return lambda x: [np.tanh(onnx_cumsum(x * wa, *spec)) for spec in CUMSUMS]


HAND_CASES = {"lstm_onnx_layouts": hand_lstm, "gru_linear_before_reset_0": hand_gru, "slice_run_time": hand_slice,
              "cumsum_exclusive_reverse": hand_cumsum}
CASES = list(TORCH_CASES) + list(HAND_CASES)


# ---------------------------------------------------------------------------------------------
# Partition, verify, chain
# ---------------------------------------------------------------------------------------------

def partition(rannc, model_path, out_dir, stages):
    args = ["--device", "cpu", "--gpus", "2", "--batch", str(BATCH)]
    if stages:
        args += ["--stages", str(stages)]
    plan = write_plan(rannc, model_path, out_dir, args)
    report = verify(rannc, out_dir)
    print(f"verify: {len(plan['stages'])} stages, max rel {max_rel(report):.3g}")
    return plan


def chain(plan, out_dir, inputs, names):
    """The whole batch through the stages in order, each microbatch cut among replicas as the
    runtime cuts it; differentiable end to end. Returns model outputs in plan order and the
    stage modules (for their parameters). `names`: the model's outputs in order."""
    microbatch = plan["batch"]["microbatch_size"]
    modules = [torch.jit.load(os.path.join(out_dir, s["file"])) for s in plan["stages"]]
    outputs = {}
    total = next(iter(inputs.values())).shape[0]
    for first in range(0, total, microbatch):
        sent = {}
        for stage, module in zip(plan["stages"], modules):
            replicas = stage["replicas_per_pipeline"]
            length = microbatch // replicas
            pieces = []
            for j in range(replicas):
                args = []
                for spec in stage["inputs"]:
                    source = spec["source"]
                    if "model_input" in source:
                        whole = inputs[source["model_input"]].narrow(spec["batch_dim"], first, microbatch)
                    else:
                        whole = sent[(source["stage"], source["output"])]
                    args.append(whole if spec["batch_dim"] < 0 else whole.narrow(spec["batch_dim"], j * length, length))
                pieces.append(module(*args))
            for o, spec in enumerate(stage["outputs"]):
                parts = [p[o] for p in pieces]
                whole = torch.cat(parts, spec["batch_dim"]) if spec["batch_dim"] >= 0 else parts[0]
                sent[(stage["id"], o)] = whole
                if spec.get("model_output"):
                    outputs.setdefault(spec["name"], []).append((spec["batch_dim"], whole))
    if sorted(outputs) != sorted(names):
        fail(f"the stages give model outputs {sorted(outputs)}, the model has {names}")
    merged = [torch.cat([t for _, t in outputs[n]], outputs[n][0][0]) for n in names]
    return merged, modules


def stage_param_grads(plan, modules):
    grads = {}
    for stage, module in zip(plan["stages"], modules):
        for p in stage["params"]:
            g = getattr(module, p["stage_name"]).grad
            if g is not None:
                grads[p["name"]] = grads.get(p["name"], 0) + g
    return grads


def check_torch_case(rannc, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".onnx")
    model = export_torch_case(name, path)
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    plan = partition(rannc, path, os.path.join(out_dir, "plan"), stages=2)
    torch.manual_seed(1)
    inputs = {n: torch.randn([2 * BATCH] + shape[1:], requires_grad=True) for n, shape in TORCH_CASES[name][1]}
    names = [o.name for o in onnx.load(path).graph.output]
    ours, modules = chain(plan, os.path.join(out_dir, "plan"), inputs, names)
    theirs = model(*inputs.values())
    theirs = list(theirs) if isinstance(theirs, tuple) else [theirs]
    seeds = [torch.randn_like(t) for t in theirs]
    sum((o * s).sum() for o, s in zip(ours, seeds)).backward()
    ours_inputs = {n: t.grad.clone() for n, t in inputs.items()}
    for n in inputs.values():
        n.grad = None
    sum((o * s).sum() for o, s in zip(theirs, seeds)).backward()
    worst = {"outputs": 0.0, "input grads": 0.0, "param grads": 0.0}
    for o, t in zip(ours, theirs):
        worst["outputs"] = max(worst["outputs"], rel(o.detach(), t.detach()))
    for n, t in inputs.items():
        worst["input grads"] = max(worst["input grads"], rel(ours_inputs[n], t.grad))
    named = dict(model.named_parameters())
    ours_params = stage_param_grads(plan, modules)
    compared = [p for p in ours_params if p in named]
    for p in compared:
        worst["param grads"] = max(worst["param grads"], rel(ours_params[p], named[p].grad))
    if len(compared) != len(named):
        fail(f"only {len(compared)} of the {len(named)} parameters of the torch model are in the plan by name")
    report(name, ops, worst, f"against PyTorch's {type(model).__name__}, {len(compared)} parameters")


def check_hand_case(rannc, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".onnx")
    reference = HAND_CASES[name](path)
    graph = onnx.load(path).graph
    ops = sorted({n.op_type for n in graph.node})
    plan = partition(rannc, path, os.path.join(out_dir, "plan"), stages=2)
    rng = np.random.default_rng(5)
    arrays = {}
    for i in graph.input:
        dims = [2 * BATCH] + [d.dim_value for d in i.type.tensor_type.shape.dim[1:]]
        arrays[i.name] = rng.standard_normal(dims)
    inputs = {n: torch.tensor(a, dtype=torch.float32) for n, a in arrays.items()}
    with torch.no_grad():
        ours, _ = chain(plan, os.path.join(out_dir, "plan"), inputs, [o.name for o in graph.output])
    want = reference(*[arrays[i.name].astype(np.float32).astype(np.float64) for i in graph.input])
    if len(ours) != len(want):
        fail(f"{len(ours)} model outputs, the reference has {len(want)}")
    worst = {"outputs": max(rel(o.numpy(), w) for o, w in zip(ours, want))}
    report(name, ops, worst, "against the NumPy transcription of the ONNX definition")


def report(name, ops, worst, against):
    figures = ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
    print(f"{name} ({' '.join(ops)}): max relative difference {against}: {figures}")
    if max(worst.values()) > TOLERANCE:
        fail(f"{name}: beyond the tolerance {TOLERANCE}")


def main():
    rannc, out_dir, case = sys.argv[1:4]
    for name in (CASES if case == "all" else [case]):
        if name not in CASES:
            fail(f"unknown case {name}; cases: {', '.join(CASES)}")
        check = check_torch_case if name in TORCH_CASES else check_hand_case
        check(rannc, os.path.join(out_dir, name), name)
    print("ok")


if __name__ == "__main__":
    main()
