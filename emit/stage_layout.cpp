#include "emit/stage_layout.h"

#include <algorithm>
#include <map>
#include <set>

namespace rannc::emit {
namespace {

// Which stage runs each unit; fills each layout's ops (graph order, glue copied once per stage).
std::vector<int> assign_units(const ir::Graph& graph, const partition::PlanResult& result,
                              std::vector<StageLayout>& layouts) {
  const auto& blocking = result.partitioning.blocking;
  const auto& units = result.partitioning.units;
  std::vector<int> stage_of_unit(units.units.size(), -1);
  std::vector<int> stamp(graph.ops().size(), -1);
  for (int s = 0; s < static_cast<int>(layouts.size()); ++s) {
    const auto& option = result.pipeline.stages[s].option;
    for (int i = blocking.begin(option.begin); i < blocking.end(option.end - 1); ++i) {
      int unit = blocking.order[i];
      stage_of_unit[unit] = s;
      for (auto op : units.units[unit].ops) {
        if (stamp[op] == s) continue;
        stamp[op] = s;
        layouts[s].ops.push_back(op);
      }
    }
    std::sort(layouts[s].ops.begin(), layouts[s].ops.end());
  }
  return stage_of_unit;
}

// Outputs first (a stage sends a tensor when a later stage reads it or the model returns it),
// then inputs, which point at the producing stage's output index.
void assign_tensors(const partition::PlanResult& result, const std::vector<int>& stage_of_unit,
                    std::vector<StageLayout>& layouts) {
  std::vector<std::pair<const partition::CrossingTensor*, std::set<int>>> crossings;
  for (const auto& tensor : result.partitioning.units.tensors) {
    int producer = tensor.producer < 0 ? -1 : stage_of_unit[tensor.producer];
    std::set<int> readers;
    for (int unit : tensor.consumers)
      if (stage_of_unit[unit] != producer) readers.insert(stage_of_unit[unit]);
    if (producer >= 0 && (!readers.empty() || tensor.model_output))
      layouts[producer].outputs.push_back({tensor.value, tensor.model_output});
    // A model input the model returns as it is (sequence lengths): the last stage passes it on.
    if (producer < 0 && tensor.model_output) {
      readers.insert(static_cast<int>(layouts.size()) - 1);
      layouts.back().outputs.push_back({tensor.value, true});
    }
    crossings.emplace_back(&tensor, std::move(readers));
  }
  for (auto& layout : layouts)
    std::sort(layout.outputs.begin(), layout.outputs.end(), [](auto& a, auto& b) { return a.value < b.value; });
  for (const auto& [tensor, readers] : crossings) {
    StageInput input{tensor->value, -1, -1};
    if (tensor->producer >= 0) {
      input.from_stage = stage_of_unit[tensor->producer];
      const auto& sent = layouts[input.from_stage].outputs;
      input.from_output = static_cast<int>(
          std::find_if(sent.begin(), sent.end(), [&](const StageOutput& o) { return o.value == tensor->value; }) -
          sent.begin());
    }
    for (int stage : readers) layouts[stage].inputs.push_back(input);
  }
  for (auto& layout : layouts)
    std::sort(layout.inputs.begin(), layout.inputs.end(), [](auto& a, auto& b) { return a.value < b.value; });
}

// Adds a weight to the stage under its attribute name: p<i> for parameters, b<i> for buffers,
// numbered in the order they are added.
StageWeight& add_weight(StageLayout& layout, const ir::Value& value) {
  bool param = value.role == ir::ValueRole::kParam;
  auto& list = param ? layout.params : layout.buffers;
  list.push_back({value.id, (param ? "p" : "b") + std::to_string(list.size()), {}});
  return list.back();
}

// The tensor weights each stage reads, named in value-id order.
void assign_weights(const ir::Graph& graph, std::vector<StageLayout>& layouts) {
  std::map<ir::ValueId, std::set<int>> readers;
  for (const auto& layout : layouts)
    for (auto op : layout.ops)
      for (auto input : graph.op(op).inputs)
        if (graph.value(input).is_weight() && graph.value(input).is_tensor()) readers[input].insert(layout.id);
  for (const auto& [id, stages] : readers) {
    for (int s : stages) {
      auto& weight = add_weight(layouts[s], graph.value(id));
      for (int other : stages)
        if (other != s) weight.shared_with.push_back(other);
    }
  }
}

// The regions a stage of tensor-parallel degree `degree` splits, and its ranks' files.
void assign_tensor_shard(const partition::TensorRegions& found, int degree, StageLayout& layout) {
  if (degree <= 1) return;
  layout.tensor_shard.degree = degree;
  auto in_stage = [&](ir::OpId op) { return std::binary_search(layout.ops.begin(), layout.ops.end(), op); };
  for (const auto& region : found.regions)
    if (in_stage(region.anchor()) && region.allows(degree)) layout.tensor_shard.regions.push_back(region);
  for (auto op : found.sequence_ops)
    if (in_stage(op)) layout.tensor_shard.sequence_ops.push_back(op);
  for (int rank = 0; rank < degree; ++rank)
    layout.tensor_shard.files.push_back("stage_" + std::to_string(layout.id) + "_tp" + std::to_string(rank) + ".pt");
}

// A selective stage's attention cores: those of every region whose core it computes whole.
void assign_recomputed_cores(const partition::TensorRegions& found, plan::Recompute recompute, StageLayout& layout) {
  if (recompute != plan::Recompute::kSelective) return;
  auto in_stage = [&](ir::OpId op) { return std::binary_search(layout.ops.begin(), layout.ops.end(), op); };
  for (const auto& region : found.regions) {
    const auto& core = region.attention_core;
    if (!core.empty() && std::all_of(core.begin(), core.end(), in_stage)) layout.recomputed_cores.push_back(core);
  }
}

}  // namespace

std::vector<StageLayout> stage_layouts(const ir::Graph& graph, const partition::PlanResult& result) {
  std::vector<StageLayout> layouts(result.pipeline.stages.size());
  for (int s = 0; s < static_cast<int>(layouts.size()); ++s) {
    layouts[s].id = s;
    layouts[s].file = "stage_" + std::to_string(s) + ".pt";
  }
  auto stage_of_unit = assign_units(graph, result, layouts);
  assign_tensors(result, stage_of_unit, layouts);
  assign_weights(graph, layouts);
  for (auto& layout : layouts) {
    const auto& option = result.pipeline.stages[layout.id].option;
    assign_tensor_shard(result.partitioning.regions, option.tensor_degree, layout);
    assign_recomputed_cores(result.partitioning.regions, option.recompute, layout);
  }
  return layouts;
}


StageLayout whole_model_layout(const ir::Graph& graph) {
  StageLayout layout;
  layout.file = "model.pt";
  for (const auto& op : graph.ops()) layout.ops.push_back(op.id);
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) layout.inputs.push_back({id, -1, -1});
  for (auto id : graph.model_outputs()) layout.outputs.push_back({id, true});
  for (const auto& value : graph.values())
    if (value.is_weight() && value.is_tensor() && !value.consumers.empty()) add_weight(layout, value);
  return layout;
}

StageLayout ops_layout(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const std::string& file,
                       const std::vector<ir::ValueId>& outputs) {
  StageLayout layout;
  layout.file = file;
  layout.ops = ops;
  std::sort(layout.ops.begin(), layout.ops.end());
  std::set<ir::OpId> mine(layout.ops.begin(), layout.ops.end());
  std::set<ir::ValueId> inputs, weights;
  for (auto op : layout.ops)
    for (auto v : graph.op(op).inputs) {
      const auto& value = graph.value(v);
      if (!value.is_tensor()) continue;
      if (value.is_weight()) weights.insert(v);
      else if (value.producer == ir::kNoId || !mine.count(value.producer)) inputs.insert(v);
    }
  // A requested output no op here computes (a model input a lookup reads as it is) passes through.
  for (auto v : outputs)
    if (graph.value(v).producer == ir::kNoId || !mine.count(graph.value(v).producer)) inputs.insert(v);
  for (auto v : inputs) layout.inputs.push_back({v, -1, -1});
  for (auto id : outputs.empty() ? graph.model_outputs() : outputs) layout.outputs.push_back({id, outputs.empty()});
  for (auto v : weights) add_weight(layout, graph.value(v));
  return layout;
}

}  // namespace rannc::emit
