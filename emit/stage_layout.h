// What each stage of a plan computes, in IR terms: its ops, the tensors it receives and sends
// (in the order of its forward's arguments and returned tuple) and the weights it reads under
// their stage names. plan.json and the stage-file writers both read this one description, so
// the files and the plan cannot disagree.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "partitioner/planner.h"

namespace rannc::emit {

struct StageInput {
  ir::ValueId value = ir::kNoId;
  int from_stage = -1;   // -1: a model input
  int from_output = -1;  // index into that stage's outputs
};

struct StageOutput {
  ir::ValueId value = ir::kNoId;
  bool model_output = false;
};

// A weight as the stage module holds it: a parameter "p<i>" or a buffer "b<i>" (TorchScript
// attribute names cannot hold the dots of qualified names).
struct StageWeight {
  ir::ValueId value = ir::kNoId;
  std::string stage_name;
  std::vector<int> shared_with;  // other stages that read the same weight (tied weights)
};

// A stage split across a tensor-parallel group of `degree` devices: the regions it splits (those
// whose anchor it computes and that allow the degree) and the file of each tensor rank, which
// holds that rank's slices of the regions' weights and runs its share of their ops.
struct TensorShard {
  int degree = 1;  // 1: not split
  std::vector<partition::TensorRegion> regions;  // ascending by anchor
  // The ops outside them that run on 1/degree of the sequence (TensorRegions::sequence_ops).
  std::vector<ir::OpId> sequence_ops;
  std::vector<std::string> files;                // "stage_<id>_tp<rank>.pt", one per tensor rank
};

struct StageLayout {
  int id = 0;
  std::string file;                 // "stage_<id>.pt", relative to plan.json
  std::vector<ir::OpId> ops;        // ascending op id (a topological order of the model)
  std::vector<StageInput> inputs;   // forward's arguments, ascending value id
  std::vector<StageOutput> outputs; // forward's returned tuple, ascending value id
  std::vector<StageWeight> params, buffers;
  TensorShard tensor_shard;
  // Selective recomputation (plan::Recompute::kSelective): the attention cores of the stage
  // (TensorRegion::attention_core, each ascending), which its files run as methods of their own
  // that backward runs again (torch_side/recompute_cores.h). Empty for other stages.
  std::vector<std::vector<ir::OpId>> recomputed_cores;
};

std::vector<StageLayout> stage_layouts(const ir::Graph& graph, const partition::PlanResult& result);

// The given ops as one stage: its inputs are every tensor they read that they do not compute
// (model inputs, or values the plan brings from elsewhere), its outputs the model's.
// `outputs` empty: the model's outputs.
StageLayout ops_layout(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const std::string& file,
                       const std::vector<ir::ValueId>& outputs = {});

// The whole model as one stage (verify's reference for a model that has no runtime of its own).
StageLayout whole_model_layout(const ir::Graph& graph);

}  // namespace rannc::emit
