#!/usr/bin/python3
"""Writes the inputs of the input-hardening error tests (no torch needed): cluster descriptions
and profile DBs that are deeply nested, far out of range or negative, a FIFO, and a valid
profile DB to derive them from; and files people hand over that are no model (a state_dict, a
legacy torch.save file, safetensors, NumPy, gzip, tar, HDF5/GGUF/TFLite headers, an AOTInductor
package, a plan, an ONNX model whose external data is missing), each named by its content.

usage: make_bad_inputs.py OUT_DIR
"""
import gzip
import io
import json
import os
import pickle
import struct
import sys
import tarfile
import zipfile

DEEP = 100000  # nested arrays: deep enough to overflow any recursion on the stack


def deep(levels):
    return "[" * levels + "]" * levels


def torch_save_files(out):
    """A torch.save'd state_dict (zip), the same in the legacy format and a torch.save'd module
    (torch.save(model)): PyTorch's own where it is installed, else the bytes it writes (a zip of
    data.pkl, data/0 and version; pickles of the legacy magic number, protocol version and system
    sizes before the object's)."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        torch.save(model.state_dict(), os.path.join(out, "state_dict.pt"))
        torch.save(model.state_dict(), os.path.join(out, "legacy_state_dict.pt"), _use_new_zipfile_serialization=False)
        torch.save(model, os.path.join(out, "pickled_module.pt"))
        return
    state_dict = b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01."
    with zipfile.ZipFile(os.path.join(out, "state_dict.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("state_dict/data.pkl", state_dict)
        z.writestr("state_dict/data/0", bytes(128))
        z.writestr("state_dict/version", b"3\n")
    with zipfile.ZipFile(os.path.join(out, "pickled_module.pt"), "w", zipfile.ZIP_STORED) as z:
        z.writestr("pickled_module/data.pkl", b"\x80\x02ctorch.nn.modules.container\nSequential\nq\x00)\x81q\x01.")
        z.writestr("pickled_module/version", b"3\n")
    with open(os.path.join(out, "legacy_state_dict.pt"), "wb") as f:
        f.write(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.")
        f.write(b"\x80\x02M\xe9\x03.")
        f.write(pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2))
        f.write(state_dict)


def onnx_missing_external_data(path):
    """x @ W with W in external file missing_weights.bin, which is not written. Needs onnx."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError:
        return
    weight = TensorProto()
    weight.name = "W"
    weight.data_type = TensorProto.FLOAT
    weight.dims.extend([8, 4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "missing_weights.bin"), ("offset", "0"), ("length", str(8 * 4 * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")], "external",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def write_foreign_files(out):
    """Files that are no model, each of a kind people hand over by mistake (magic bytes as the
    real tools write them; the extension never matters)."""
    def put(name, data):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)

    torch_save_files(out)
    header = json.dumps({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}).encode()
    put("weights.safetensors", struct.pack("<Q", len(header)) + header + bytes(16))
    npy_header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }"
    npy_header += b" " * (63 - len(npy_header)) + b"\n"
    put("array.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(npy_header)) + npy_header + bytes(16))
    put("pickled.pkl", pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    put("model.onnx.gz", gzip.compress(b"not really a model\n", mtime=0))
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as t:
        data = b"inside a tar\n"
        info = tarfile.TarInfo("model.onnx")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    put("models.tar", tar.getvalue())
    put("keras.h5", b"\x89HDF\r\n\x1a\n" + b"\x00" * 504)
    put("llama.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0) + bytes(64))
    put("model.tflite", struct.pack("<I", 28) + b"TFL3" + bytes(64))
    # An AOTInductor package as torch._inductor.aoti_compile_and_package writes it: compiled
    # code and its metadata under data/aotinductor/, no exported program.
    with zipfile.ZipFile(os.path.join(out, "aoti_package.pt2"), "w") as z:
        z.writestr("model/archive_format", "pt2")
        z.writestr("model/version", "0")
        z.writestr("model/data/aotinductor/model/cxyz.cpp", "// generated by AOTInductor\n")
        z.writestr("model/data/aotinductor/model/cxyz.so", b"\x7fELF" + bytes(60))
        z.writestr("model/data/aotinductor/model/cxyz_metadata.json", '{"AOTI_DEVICE_KEY": "cpu"}')
    # A plan given where a model goes (never named plan.json: the schema test reads those).
    plan = {"batch": {"global": 8, "microbatches": 2, "pipelines": 1}, "cluster": {"gpus": 2}, "format": "rannc-plan",
            "version": 1, "stages": []}
    put("a_plan_as_model.json", json.dumps(plan, indent=2).encode())
    put("config.json", json.dumps({"hidden_size": 768, "num_layers": 12}).encode())
    onnx_missing_external_data(os.path.join(out, "external_data_missing.onnx"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)

    def write(name, content):
        with open(os.path.join(out, name), "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))

    cluster = {"nodes": 1, "gpus_per_node": 2, "device": "a100-80g",
               "intra_node": {"bandwidth_gbps": 300, "latency_us": 3},
               "inter_node": {"bandwidth_gbps": 25, "latency_us": 5}}
    write("deep_cluster.json", '{"nodes": 1, "gpus_per_node": 2, "device": ' + deep(DEEP) + "}")
    write("latency_cluster.json", {**cluster, "intra_node": {"bandwidth_gbps": 300, "latency_us": 1e308}})
    write("bandwidth_cluster.json", {**cluster, "inter_node": {"bandwidth_gbps": 1e-308, "latency_us": 5}})
    custom = {"name": "g", "peak_fp32_tflops": 1e300, "peak_half_tflops": 2, "mem_bandwidth_gbps": 3, "mem": "1G"}
    write("tflops_cluster.json", {**cluster, "device": custom})
    # At the edges of the accepted ranges: a plan with huge but finite times.
    slow = {"name": "slow", "peak_fp32_tflops": 1e-6, "peak_half_tflops": 1e-6, "mem_bandwidth_gbps": 1e-6,
            "mem": "80G", "op_overhead_us": 1e7}
    write("edge_cluster.json", {"nodes": 1, "gpus_per_node": 2, "device": slow,
                                "intra_node": {"bandwidth_gbps": 1e-6, "latency_us": 1e7},
                                "inter_node": {"bandwidth_gbps": 1e-6, "latency_us": 1e7}})

    op = {"kind": "aten::linear", "class": "matmul", "flops_fwd": 1e6, "bytes_fwd": 1e4, "flops_bwd": 2e6,
          "bytes_bwd": 2e4, "fwd_ms": 0.1, "bwd_ms": 0.2, "fwd_peak_bytes": 1024, "retained_bytes": 512,
          "bwd_peak_bytes": 2048, "reps": 5}
    model = {"path": "m.pt", "device": "cpu", "signatures": {"sig": 2}, "unprofiled_kinds": [],
             "unprofiled_signatures": 0, "ops": 2, "fwd_ms": 0.2, "bwd_ms": 0.4, "peak_bytes": 4096}
    db = {"format": "rannc-profile-db", "version": 1,
          "devices": {"cpu": {"description": "test", "peak_fp32_flops": 1e11, "mem_bandwidth": 2e10,
                              "op_overhead": 5e-6, "ops": {"sig": op}}},
          "models": {"key": model}}
    write("good_db.json", db)

    def changed(name, change):
        copy = json.loads(json.dumps(db))
        change(copy)
        write(name, copy)

    changed("negative_count_db.json", lambda d: d["models"]["key"]["signatures"].update(sig=-3))
    changed("negative_ops_db.json", lambda d: d["models"]["key"].update(ops=-1))
    changed("negative_bytes_db.json", lambda d: d["devices"]["cpu"]["ops"]["sig"].update(fwd_peak_bytes=-5))
    changed("negative_time_db.json", lambda d: d["devices"]["cpu"]["ops"]["sig"].update(bwd_ms=-0.5))
    changed("huge_time_db.json", lambda d: d["devices"]["cpu"]["ops"]["sig"].update(fwd_ms=1e300))
    changed("text_count_db.json", lambda d: d["models"]["key"].update(unprofiled_signatures="x" * 100000))
    write("deep_db.json", '{"format": "rannc-profile-db", "version": 1, "devices": ' + deep(DEEP) + "}")

    write_foreign_files(out)

    fifo = os.path.join(out, "fifo.json")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    fifo_model = os.path.join(out, "fifo.pt")
    if not os.path.exists(fifo_model):
        os.mkfifo(fifo_model)
    print("ok: bad inputs in", out)


if __name__ == "__main__":
    main()
