#!/usr/bin/python3
"""Generate the sample models used by the tools and tests.

For every model NAME this writes into --out:
  NAME.trace.pt   torch.jit.trace of the model in train mode
  NAME.script.pt  torch.jit.script of the same model (only for models that script)
  NAME.onnx       torch.onnx.export of the same model (opset 17, training mode)
and records inputs, outputs, parameter counts and file names in manifest.json.
Every file is loaded back and checked (see sample_models.py).

Run with /usr/bin/python3 (the interpreter that has torch). This file uses only the
standard library, so that a run with nothing to do returns without importing torch.
"""

import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = "manifest.json"
# The files whose bytes define what gets generated; their hash tells a stale manifest apart.
GENERATOR_FILES = [os.path.join(HERE, "generate.py"), os.path.join(HERE, "sample_models.py")]
BUILTIN_NAMES = ["mlp", "gpt", "bert", "resnet50", "dlrm"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--only", default="",
                        help="comma-separated built-in models to make instead of all of %s"
                        % ",".join(BUILTIN_NAMES))
    parser.add_argument("--torchvision", default="",
                        help="comma-separated torchvision classification models to make as well, "
                        "written as tv_NAME")
    args = parser.parse_args(argv)
    args.only = split_names(args.only)
    args.torchvision = split_names(args.torchvision)
    unknown = [n for n in args.only if n not in BUILTIN_NAMES]
    if unknown:
        parser.error("unknown model(s) for --only: %s" % ",".join(unknown))
    return args


def split_names(text):
    return [n.strip() for n in text.split(",") if n.strip()]


def requested_entries(args):
    """Manifest names of the requested models: the built-ins (all, or --only's) plus --torchvision's."""
    builtins = args.only or BUILTIN_NAMES
    return list(builtins) + ["tv_" + n for n in args.torchvision]


def generator_sha256():
    digest = hashlib.sha256()
    for path in GENERATOR_FILES:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def read_manifest(out_dir):
    path = os.path.join(out_dir, MANIFEST)
    if not os.path.exists(path):
        return {"models": {}}
    with open(path) as f:
        return json.load(f)


def write_manifest(out_dir, manifest):
    path = os.path.join(out_dir, MANIFEST)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def entry_is_current(out_dir, entry, sha):
    if entry is None or entry.get("generator_sha256") != sha:
        return False
    return all(os.path.exists(os.path.join(out_dir, f)) for f in entry["files"].values())


def stale_entries(manifest, out_dir, names, sha):
    # Each entry carries the hash of the generator that wrote it: after an --only run with
    # a changed generator, the models that run skipped must still count as stale.
    return [n for n in names if not entry_is_current(out_dir, manifest["models"].get(n), sha)]


def fix_hash_seed(argv):
    """Re-run this script under PYTHONHASHSEED=0 unless it already runs so.

    Scripted modules save their constants in set order, which follows the per-process
    string hash; a fixed seed makes the .script.pt files byte-identical between runs.
    """
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + list(argv))


def main(argv):
    args = parse_args(argv)
    names = requested_entries(args)
    sha = generator_sha256()
    manifest = read_manifest(args.out)
    todo = stale_entries(manifest, args.out, names, sha)
    if not todo and manifest.get("generator_sha256") == sha:
        print("samples up to date")
        return 0

    fix_hash_seed(argv)
    # Imported only now: importing torch costs more than a second. No .pyc is written,
    # so running the generator leaves the source folder untouched.
    sys.dont_write_bytecode = True
    sys.path.insert(0, HERE)
    import sample_models

    os.makedirs(args.out, exist_ok=True)
    manifest["generator_sha256"] = sha
    for name in todo:
        entry = sample_models.export(name, args.out)
        entry["generator_sha256"] = sha
        manifest["models"][name] = entry
        # Written after each model, so that an interrupted run keeps what it finished.
        write_manifest(args.out, manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
