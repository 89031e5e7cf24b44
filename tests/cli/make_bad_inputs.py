#!/usr/bin/python3
"""Writes the inputs of the input-hardening error tests (no torch needed): cluster descriptions
and profile DBs that are deeply nested, far out of range or negative, a FIFO, and a valid
profile DB to derive them from.

usage: make_bad_inputs.py OUT_DIR
"""
import json
import os
import sys

DEEP = 100000  # nested arrays: deep enough to overflow any recursion on the stack


def deep(levels):
    return "[" * levels + "]" * levels


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

    fifo = os.path.join(out, "fifo.json")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    fifo_model = os.path.join(out, "fifo.pt")
    if not os.path.exists(fifo_model):
        os.mkfifo(fifo_model)
    print("ok: bad inputs in", out)


if __name__ == "__main__":
    main()
