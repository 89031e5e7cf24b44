// A small valid plan.json for the tests of its readers and of the files made from it: two
// stages on a cluster of 2 nodes x 2 devices, the second stage with two replicas on both nodes,
// one device unused; and the same plan with two model chunks per rank.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rannc::test {

inline nlohmann::json small_plan() {
  return nlohmann::json::parse(R"({
  "format": "rannc-plan", "version": 1,
  "model": {"path": "models/tiny.onnx", "sha256": "0123456789abcdef", "format": "onnx", "params": 10,
            "param_bytes": 40, "evaluated_batch": 4,
            "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32", "batch_dim": 0}]},
  "cluster": {"gpus": 4, "nodes": 2, "gpus_per_node": 2, "mem_bytes": 1073741824, "device": "a100-80g"},
  "batch": {"global": 8, "pipelines": 1, "microbatches": 2, "microbatch_size": 4},
  "schedule": "1f1b", "optimizer": "adam", "precision": "fp32",
  "stages": [
    {"id": 0, "file": "stage_0.pt", "ranks": [0], "replicas": 1, "replicas_per_pipeline": 1,
     "blocks": [0, 3], "op_range": "aten::linear h .. aten::relu a",
     "inputs": [{"name": "x", "shape": [4, 8], "dtype": "float32", "batch_dim": 0, "source": {"model_input": "x"}}],
     "outputs": [{"name": "a", "shape": [4, 16], "dtype": "float32", "batch_dim": 0}],
     "params": [{"name": "fc1.weight", "stage_name": "p0", "numel": 8, "bytes": 32}],
     "buffers": [],
     "recompute": false, "offload": false,
     "predicted": {"fwd_ms": 1.5, "bwd_ms": 3, "mem_bytes": 536870912, "p2p_ms": 0, "allreduce_ms": 0, "in_flight": 2}},
    {"id": 1, "file": "stage_1.pt", "ranks": [1, 2], "replicas": 2, "replicas_per_pipeline": 2,
     "blocks": [3, 5], "op_range": "aten::linear y .. aten::linear y",
     "inputs": [{"name": "a", "shape": [2, 16], "dtype": "float32", "batch_dim": 0, "source": {"stage": 0, "output": 0}}],
     "outputs": [{"name": "y", "shape": [2, 1], "dtype": "float32", "batch_dim": 0, "model_output": true}],
     "params": [{"name": "fc2.weight", "stage_name": "p0", "numel": 2, "bytes": 8, "shared_with": [0]}],
     "buffers": [{"name": "scale", "stage_name": "b0", "numel": 1, "bytes": 4}],
     "recompute": true, "offload": false,
     "predicted": {"fwd_ms": 1, "bwd_ms": 2, "mem_bytes": 268435456}}],
  "ranks": [{"rank": 0, "node": 0, "local_rank": 0, "stage": 0, "replica": 0},
            {"rank": 1, "node": 0, "local_rank": 1, "stage": 1, "replica": 0},
            {"rank": 2, "node": 1, "local_rank": 0, "stage": 1, "replica": 1}],
  "unused_devices": {"count": 1, "ranks": [3], "reason": "no stage runs faster with more replicas"},
  "predicted": {"iteration_ms": 12.5, "samples_per_s": 640, "bubble_fraction": 0.25, "lower_bound_ms": 10,
                "efficiency": 0.8, "peak_mem_bytes": 536870912}
})");
}

// The small plan cut into two model chunks per rank (interleave 2): stages 2 and 3 run on the
// ranks of stages 0 and 1 and take the activations on from stage 1 to the model's output.
inline nlohmann::json interleaved_plan() {
  auto plan = small_plan();
  plan["interleave"] = 2;
  auto& stages = plan["stages"];
  stages[1]["outputs"][0].erase("model_output");
  auto later = [&](int from, int id, const char* input, int rows, const char* output, const char* weight) {
    auto stage = stages[from];
    stage["id"] = id;
    stage["file"] = "stage_" + std::to_string(id) + ".pt";
    stage["blocks"] = {id * 2 + 1, id * 2 + 3};
    stage["inputs"] = {{{"name", input}, {"shape", {rows, 1}}, {"dtype", "float32"}, {"batch_dim", 0},
                        {"source", {{"stage", id - 1}, {"output", 0}}}}};
    stage["outputs"] = {{{"name", output}, {"shape", {rows, 1}}, {"dtype", "float32"}, {"batch_dim", 0}}};
    stage["params"] = {{{"name", weight}, {"stage_name", "p0"}, {"numel", 1}, {"bytes", 4}}};
    return stage;
  };
  stages.push_back(later(0, 2, "y", 4, "z", "fc3.weight"));
  stages.push_back(later(1, 3, "z", 2, "out", "fc4.weight"));
  stages[3]["outputs"][0]["model_output"] = true;
  return plan;
}

}  // namespace rannc::test
