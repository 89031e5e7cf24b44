#!/usr/bin/python3
"""The `cpu` device on models the team did not write: predicted/measured training step on this
machine, without a profile DB and with one (issue 28, item 5).

Models (traced in train() mode, dropout 0), each at a batch that keeps a step under a second:
  transformer  torch.nn.TransformerEncoder: 4 layers, d_model 256, 8 heads, feed-forward 1024,
               batch-first input 8 x 128 x 256
  vit_s16      torchvision's VisionTransformer in the ViT-S/16 configuration (12 layers, width
               384, 6 heads, MLP 1536) on 2 x 3 x 224 x 224
  densenet121  torchvision's densenet121 on 2 x 3 x 224 x 224

For each model: the measured step is `profile --check` (median of whole libtorch training steps:
forward, rannc-run's loss, backward); the predictions are
  no DB       `inspect --device cpu`: the roofline on the `cpu` device alone (this machine's
              figures; with RANNC_CPU_CALIBRATION=fixed, the preset's fixed ones);
  samples DB  `inspect --device cpu --profile-db` with a DB of the project's own samples
              (ResNet-50, GPT-style): efficiencies fitted on other models, none of this one's ops
              (shown, not judged: how well a fit carries to other models);
  own DB      `profile --check`'s prediction: every op of the model measured alone.
Criteria, on the medians: no DB within 1.5x, own DB within 1.25x. Timings on a shared 2-core
machine move with the other work on it (2-3x under a load of 4): --repeat N runs everything N
times, each round with a fresh CPU calibration (XDG_CACHE_HOME is set to a new folder per round),
and prints the medians and the range of the per-round ratios.

usage: cpu_calibration_bench.py BINARY SAMPLES_DIR [--repeat N] [--models DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = {  # name: (input spec, description)
    "transformer": ("src:8x128x256", "nn.TransformerEncoder 4x256"),
    "vit_s16": ("x:2x3x224x224", "torchvision ViT-S/16"),
    "densenet121": ("x:2x3x224x224", "torchvision DenseNet-121"),
}
SAMPLES = [("resnet50.trace.pt", "x:2x3x224x224"), ("gpt.trace.pt", "tokens:2x32:int64")]
NO_DB_LIMIT, DB_LIMIT = 1.5, 1.25


def build_model(name):
    import torch
    import torchvision
    torch.manual_seed(0)
    if name == "transformer":
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, dropout=0.0,
                                                   batch_first=True)
        return torch.nn.TransformerEncoder(layer, num_layers=4), torch.randn(8, 128, 256)
    if name == "vit_s16":
        model = torchvision.models.VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=6,
                                                     hidden_dim=384, mlp_dim=1536, dropout=0.0, attention_dropout=0.0)
        return model, torch.randn(2, 3, 224, 224)
    return torchvision.models.densenet121(weights=None), torch.randn(2, 3, 224, 224)


def write_models(folder):
    """Traces each model into FOLDER/NAME.pt unless it is there already."""
    import torch
    os.makedirs(folder, exist_ok=True)
    for name in MODELS:
        path = os.path.join(folder, name + ".pt")
        if os.path.exists(path):
            continue
        model, example = build_model(name)
        model.train()
        torch.jit.trace(model, example, check_trace=False).save(path)


def run_json(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr}")
    return json.loads(result.stdout)


def predicted_ms(binary, model, spec, db=None):
    command = [binary, "inspect", model, "--input", spec, "--device", "cpu", "--optimizer", "sgd", "--json"]
    return run_json(command + (["--profile-db", db] if db else []))["predicted"]["step_ms"]


def profile_check(binary, model, spec, db):
    return run_json([binary, "profile", model, "--input", spec, "--profile-db", db, "--check", "--json"])


def samples_db(binary, samples, folder):
    db = os.path.join(folder, "samples.db.json")
    for name, spec in SAMPLES:
        run_json([binary, "profile", os.path.join(samples, name), "--input", spec, "--profile-db", db, "--json"])
    return db


def one_round(binary, models, samples_db_path, folder):
    """{model: {"measured", "no_db", "samples_db", "own_db"}} in ms."""
    cache = tempfile.mkdtemp(dir=folder)  # a fresh CPU calibration each round
    os.environ["XDG_CACHE_HOME"] = cache
    rows = {}
    for name, (spec, _) in MODELS.items():
        model = os.path.join(models, name + ".pt")
        own_db = os.path.join(folder, name + ".db.json")
        if os.path.exists(own_db):
            os.remove(own_db)  # a fresh DB each round: profile --check then measures every op
        checked = profile_check(binary, model, spec, own_db)
        rows[name] = {"measured": checked["measured"]["step_ms"], "own_db": checked["predicted"]["step_ms"],
                      "no_db": predicted_ms(binary, model, spec),
                      "samples_db": predicted_ms(binary, model, spec, samples_db_path)}
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("samples")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--models", help="folder for the traced models (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        models = args.models or os.path.join(tmp, "models")
        write_models(models)
        db = samples_db(args.binary, args.samples, tmp)
        rounds = [one_round(args.binary, models, db, tmp) for _ in range(args.repeat)]
    failures = []
    print(f"{'model':<28} {'measured':>9} {'no DB':>9} {'ratio':>17} {'samples DB':>10} {'ratio':>17}"
          f" {'own DB':>9} {'ratio':>17}")
    for name, (_, title) in MODELS.items():
        med = {key: statistics.median(r[name][key] for r in rounds) for key in rounds[0][name]}
        ratios = {key: [r[name][key] / r[name]["measured"] for r in rounds] for key in ("no_db", "samples_db", "own_db")}
        ratio = {key: statistics.median(values) for key, values in ratios.items()}
        shown = {key: f"{ratio[key]:.2f}" + (f" ({min(v):.2f}-{max(v):.2f})" if len(v) > 1 else "")
                 for key, v in ratios.items()}
        print(f"{title:<28} {med['measured']:>7.1f}ms {med['no_db']:>7.1f}ms {shown['no_db']:>17}"
              f" {med['samples_db']:>8.1f}ms {shown['samples_db']:>17} {med['own_db']:>7.1f}ms {shown['own_db']:>17}")
        for key, limit in (("no_db", NO_DB_LIMIT), ("own_db", DB_LIMIT)):
            if not 1 / limit <= ratio[key] <= limit:
                failures.append(f"{name}: {key} predicted/measured {ratio[key]:.2f} is beyond {limit}x")
    print(f"medians of {args.repeat} round(s) (ratios: median of the per-round ratios, their range);"
          f" load average {os.getloadavg()[0]:.1f}")
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
