"""`inspect --device` predicts a training step for every device preset: faster devices are
faster, optimizer state and precision change memory as the formulas say, fused attention and
elementwise kernels keep fewer activations and take less time, and an op kind
without a formula is costed (never free) with a warning.

usage: check_predicted.py BINARY SAMPLES_DIR
"""
import json
import subprocess
import sys

PRESETS = ["v100-32g", "a100-40g", "a100-80g", "h100-80g", "h200", "cpu"]


def predict(binary, model, *options, input_args=()):
    args = [binary, "inspect", model, "--json"] + [a for spec in input_args for a in ("--input", spec)] + list(options)
    result = subprocess.run(args, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed: {result.stderr.strip()}")
    return json.loads(result.stdout), result.stderr


def main():
    binary, samples = sys.argv[1:3]
    problems = []
    gpt = f"{samples}/gpt.onnx"  # batch 2, like the trace below
    step = {}
    for preset in PRESETS:
        precision = "fp16-mixed" if preset in ("v100-32g", "cpu") else "bf16-mixed"
        report, _ = predict(binary, gpt, "--batch", "2", "--device", preset, "--precision", precision)
        p = report["predicted"]
        step[preset] = p["step_ms"]
        print(f"{preset:<10} {precision:<11} step {p['step_ms']:9.4f} ms  memory {p['memory_bytes']['total'] / 2**20:8.2f} MiB")
        if not (p["fwd_ms"] > 0 and p["bwd_ms"] > p["fwd_ms"] * 0.5):
            problems.append(f"{preset}: implausible forward/backward {p['fwd_ms']}/{p['bwd_ms']} ms")
    if not step["h100-80g"] < step["a100-80g"] < step["v100-32g"] < step["cpu"]:
        problems.append(f"devices not ordered by speed: {step}")

    fp32, _ = predict(binary, gpt, "--batch", "2", "--device", "a100-80g", "--optimizer", "sgd")
    adam, _ = predict(binary, gpt, "--batch", "2", "--device", "a100-80g", "--optimizer", "adam")
    bf16, _ = predict(binary, gpt, "--batch", "2", "--device", "a100-80g", "--optimizer", "adam", "--precision", "bf16-mixed")
    params = fp32["params"]
    m32, madam, m16 = (r["predicted"]["memory_bytes"] for r in (fp32, adam, bf16))
    if m32["weights"] != 4 * params + fp32["buffer_bytes"] or m32["grads"] != 4 * params or m32["optimizer"] != 0:
        problems.append(f"fp32 SGD state is not 4+4 bytes per parameter: {m32}")
    if madam["optimizer"] != 8 * params:
        problems.append(f"Adam state is not 8 bytes per parameter: {madam['optimizer']}")
    # Half, but for what the loss keeps of the logits: it reads them in fp32 under autocast.
    if not m32["activations"] / 2 <= m16["activations"] < 0.75 * m32["activations"]:
        problems.append(f"bf16 activations {m16['activations']} are not about half of fp32's {m32['activations']}")

    # A stack with fused kernels keeps fewer activations and takes less time; the report says so.
    for flags in (["--attention", "fused"], ["--elementwise", "fused"]):
        fused, _ = predict(binary, gpt, "--batch", "2", "--device", "a100-80g", "--precision", "bf16-mixed", *flags)
        f, u = fused["predicted"], bf16["predicted"]
        kind = flags[0][2:]
        if f.get(kind) != "fused" or kind in u:
            problems.append(f"{' '.join(flags)}: the prediction names {f.get(kind)!r}, op by op {u.get(kind)!r}")
        if not (f["memory_bytes"]["activations"] < u["memory_bytes"]["activations"] and f["step_ms"] < u["step_ms"]):
            problems.append(f"{' '.join(flags)}: activations {f['memory_bytes']['activations']} and step {f['step_ms']} "
                            f"are not below op by op's {u['memory_bytes']['activations']} and {u['step_ms']}")

    # The trace and the ONNX export of one model are costed alike; the export has more ops
    # (a linear is Transpose + MatMul + Add), each with a launch overhead.
    trace, _ = predict(binary, f"{samples}/gpt.trace.pt", "--device", "a100-80g", input_args=["tokens:2x32:int64"])
    ratio = trace["predicted"]["fwd_ms"] / fp32["predicted"]["fwd_ms"]
    print(f"gpt forward, TorchScript / ONNX: {ratio:.2f}")
    if not 0.5 < ratio <= 1.05:
        problems.append(f"TorchScript and ONNX forward predictions differ by {ratio:.2f}x")

    # DLRM's ONNX export has Loop ops (EmbeddingBag): costed as memory-bound, with a warning.
    dlrm, warning = predict(binary, f"{samples}/dlrm.onnx", "--device", "a100-80g")
    if "warning: no cost formula" not in warning or "onnx::Loop" not in warning:
        problems.append(f"no warning about uncosted kinds: {warning!r}")
    if dlrm["predicted"]["ms_by_class"].get("unknown", 0) <= 0:
        problems.append("uncosted ops were costed as free")
    if problems:
        sys.exit("FAILED:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
