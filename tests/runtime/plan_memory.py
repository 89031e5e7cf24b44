"""The memory a plan predicts for each device, as rannc-partition computes it (cost::chunks_memory):
one stage's `mem_bytes`, or with interleave v > 1 the device group's chunks together; and the
check of rannc-run's measured peaks against it."""


def device_memory(plan, stage_id):
    """Predicted bytes on a device running stage `stage_id` (with interleave, its group's first
    stage), host memory included: on the CPU an offloaded stage's host memory is the same memory."""
    v = plan.get("interleave", 1)
    p = len(plan["stages"]) // v
    chunks = [s["predicted"] for s in plan["stages"][stage_id::p]] if v > 1 else [plan["stages"][stage_id]["predicted"]]
    host = sum(c.get("host_mem_bytes", 0) for c in chunks)
    if len(chunks) == 1:
        return chunks[0]["mem_bytes"] + host
    parts = [c["memory"] for c in chunks]

    def total(key):
        return sum(m.get(key, 0) for m in parts)

    passes = total("activations") + total("comm_buffers") + max(m["workspace"] for m in parts)
    return total("weights") + total("grads") + total("optimizer") + max(passes, total("step_buffers")) + host


def memory_misses(report, plan, low):
    """Each rank's measured peak over the plan's prediction for its device, printed; returns the
    ranks whose ratio is not within [low, 1] (a peak above the prediction, or far below it)."""
    ratios = {r["rank"]: r["peak_mem_bytes"] / device_memory(plan, r["stage"]) for r in report["ranks"]}
    print("peak memory / predicted per rank:", {rank: round(ratio, 3) for rank, ratio in sorted(ratios.items())})
    return {rank: round(ratio, 3) for rank, ratio in ratios.items() if not low <= ratio <= 1}
