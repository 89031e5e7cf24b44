#!/usr/bin/python3
"""Writes one torch.export program in every .pt2 layout PyTorch has written, from a PyTorch 2.6
archive (tests/models/pt2/tiny_attention.pt2), with plain zipfile: no PyTorch 2.8 or 2.9 needed.

usage: make_pt2_layouts.py --seed PT2 --out DIR

Into DIR (manifest.json lists them, with the state_dict names every layout must give):
  v26.pt2          the seed as PyTorch 2.6 wrote it (flat: serialized_exported_program.json,
                   serialized_state_dict.pt, serialized_constants.pt, version), entries stored
  v26_deflated.pt2 the same entries, deflated
  v28.pt2          the PT2 archive of PyTorch 2.8: <root>/archive_format ("pt2"), archive_version,
                   models/model.json, data/weights/model.pt and data/constants/model.pt (torch.save
                   files), data/sample_inputs/model.pt; some entries deflated, some stored
  v29.pt2          the PT2 archive of PyTorch 2.9 and later: data/weights/model_weights_config.json
                   and raw storages weight_N, data/constants/model_constants_config.json and
                   tensor_N. Written as PyTorch writes them (a tied weight's names share one file)
                   and beyond: norm.weight and norm.bias in one storage file at storage offsets 0
                   and 16, pos.weight transposed (strides [1, 8] over its transpose's bytes), gain
                   at storage offset 3 of a padded storage; payloads stored and deflated
  aoti.pt2         what an AOTInductor package looks like: archive_format pt2, archive_version,
                   data/aotinductor/model/model.so and .cpp, and no models/
  weights.pt       torch.save(model.state_dict(), f): tensors, not a model
Run with the build's Python (the torch it has reads and writes torch.save files).
"""
import argparse
import io
import json
import os
import sys
import zipfile

import torch

FIXED_TIME = (2025, 1, 1, 0, 0, 0)  # the same bytes on every run
# torch/_export/serde/schema.py ScalarType
SCHEMA_DTYPE = {torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4, torch.int64: 5, torch.float16: 6,
                torch.float32: 7, torch.float64: 8, torch.bool: 12, torch.bfloat16: 13}


def write_zip(path, entries):
    """entries: (name, bytes, deflated?) in order."""
    with zipfile.ZipFile(path + ".tmp", "w") as z:
        for name, data, deflated in entries:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED if deflated else zipfile.ZIP_STORED
            z.writestr(info, data)
    os.replace(path + ".tmp", path)


def saved(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def raw_bytes(tensor):
    return tensor.detach().contiguous().numpy().tobytes()


def tensor_meta(tensor, sizes=None, strides=None, offset=0, requires_grad=None):
    sizes = list(tensor.shape) if sizes is None else sizes
    if strides is None:
        strides, step = [], 1
        for n in reversed(sizes):
            strides.insert(0, step)
            step *= n
    return {"dtype": SCHEMA_DTYPE[tensor.dtype], "sizes": [{"as_int": n} for n in sizes],
            "requires_grad": bool(tensor.requires_grad if requires_grad is None else requires_grad),
            "device": {"type": "cpu", "index": None}, "strides": [{"as_int": s} for s in strides],
            "storage_offset": {"as_int": offset}, "layout": 7}


class Payloads:
    """data/<folder>/ of a 2.9 archive: raw storage files and their config."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.config = {}
        self.files = []  # (path_name, bytes, deflated)

    def add_file(self, data, deflated=False):
        name = "%s%d" % (self.prefix, len(self.files))
        self.files.append((name, data, deflated))
        return name

    def add(self, fqn, path_name, meta, is_param):
        self.config[fqn] = {"path_name": path_name, "is_param": is_param, "use_pickle": False, "tensor_meta": meta}


def v29_weights(state_dict):
    """The state_dict as 2.9 raw payloads, with the storage sharing and strides described above."""
    weights = Payloads("weight_")
    done = {}
    params = {name for name, t in state_dict.items() if isinstance(t, torch.nn.Parameter)}
    for name, tensor in state_dict.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        is_param = name in params
        if name in weights.config:  # laid out with another name's storage
            continue
        if key in done:  # a tied weight: PyTorch writes its storage once, for every name
            weights.add(name, done[key], tensor_meta(tensor), is_param)
        elif name == "norm.weight":
            both = torch.cat([state_dict["norm.weight"].detach(), state_dict["norm.bias"].detach()])
            path = weights.add_file(raw_bytes(both), deflated=True)
            weights.add("norm.weight", path, tensor_meta(tensor), True)
            bias = state_dict["norm.bias"]
            weights.add("norm.bias", path, tensor_meta(bias, offset=tensor.numel()), True)
        elif name == "pos.weight":
            rows, cols = tensor.shape
            path = weights.add_file(raw_bytes(tensor.detach().t()))
            weights.add(name, path, tensor_meta(tensor, strides=[1, rows]), True)
        elif name == "gain":
            padded = torch.cat([torch.full((3,), -7.0), tensor.detach(), torch.full((2,), 9.0)])
            path = weights.add_file(raw_bytes(padded))
            weights.add(name, path, tensor_meta(tensor, offset=3), is_param)
        else:
            path = weights.add_file(raw_bytes(tensor), deflated=len(weights.files) % 2 == 1)
            weights.add(name, path, tensor_meta(tensor), is_param)
            done[key] = path
    missing = set(state_dict) - set(weights.config)
    if missing:
        sys.exit("make_pt2_layouts.py: the seed has no %s to lay out as planned" % sorted(missing))
    return weights


def v29_constants(constants):
    payloads = Payloads("tensor_")
    for name, tensor in constants.items():
        payloads.add(name, payloads.add_file(raw_bytes(tensor)), tensor_meta(tensor, requires_grad=False), False)
    return payloads


def pt2_archive(root, program, weights_entries, constants_entries, sample_inputs):
    entries = [(root + "archive_format", b"pt2", False), (root + "archive_version", b"0", False),
               (root + "byteorder", b"little", False), (root + ".data/version", b"1\n", False),
               (root + "models/model.json", program, True)]
    entries += [(root + "data/weights/" + n, d, z) for n, d, z in weights_entries]
    entries += [(root + "data/constants/" + n, d, z) for n, d, z in constants_entries]
    if sample_inputs is not None:
        entries.append((root + "data/sample_inputs/model.pt", sample_inputs, False))
    return entries


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", required=True, help="a .pt2 in PyTorch 2.6's layout")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with zipfile.ZipFile(args.seed) as z:
        flat = [(info.filename, z.read(info.filename)) for info in z.infolist()]
    files = dict(flat)
    program = files["serialized_exported_program.json"]
    state_dict = torch.load(io.BytesIO(files["serialized_state_dict.pt"]))
    constants = torch.load(io.BytesIO(files["serialized_constants.pt"]))
    sample_inputs = files.get("serialized_example_inputs.pt")

    write_zip(os.path.join(args.out, "v26.pt2"), [(n, d, False) for n, d in flat])
    write_zip(os.path.join(args.out, "v26_deflated.pt2"), [(n, d, True) for n, d in flat])

    # 2.8: the same torch.save files under the PT2 archive's names; its root as PyTorch names a
    # buffer's archive.
    write_zip(os.path.join(args.out, "v28.pt2"), pt2_archive(
        "archive/", program, [("model.pt", saved(state_dict), True)], [("model.pt", saved(constants), False)],
        sample_inputs))

    # 2.9: raw payloads and configs; its root as PyTorch names a file's archive (the file's stem).
    weights, consts = v29_weights(state_dict), v29_constants(constants)
    config = lambda p: json.dumps({"config": p.config}).encode()  # noqa: E731
    write_zip(os.path.join(args.out, "v29.pt2"), pt2_archive(
        "v29/", program, weights.files + [("model_weights_config.json", config(weights), True)],
        consts.files + [("model_constants_config.json", config(consts), False)], sample_inputs))

    write_zip(os.path.join(args.out, "aoti.pt2"), [
        ("aoti/archive_format", b"pt2", False), ("aoti/archive_version", b"0", False),
        ("aoti/data/aotinductor/model/model.cpp", b"// generated by AOTInductor\n", True),
        ("aoti/data/aotinductor/model/model.so", b"\x7fELF" + bytes(60), False),
        ("aoti/data/aotinductor/model/model_metadata.json", b"{\"AOTI_DEVICE_KEY\": \"cpu\"}", True)])

    with open(os.path.join(args.out, "weights.pt"), "wb") as f:
        f.write(saved(state_dict))

    manifest = {"seed": os.path.abspath(args.seed), "state_dict_names": list(state_dict),
                "layouts": ["v26.pt2", "v26_deflated.pt2", "v28.pt2", "v29.pt2"],
                "v29_weights_config": weights.config}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print("wrote %s: %s" % (args.out, ", ".join(manifest["layouts"] + ["aoti.pt2", "weights.pt"])))


if __name__ == "__main__":
    main()
