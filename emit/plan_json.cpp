#include "emit/plan_json.h"

#include <algorithm>
#include <map>
#include <set>

#include "support/stable_number.h"

namespace rannc::emit {
namespace {

using nlohmann::json;
using partition::PlanResult;

// Which stage runs each unit, and the ops of each stage.
struct StageMap {
  std::vector<int> stage_of_unit;
  std::vector<std::vector<ir::OpId>> ops;  // per stage, in graph order, without repeats
};

StageMap map_stages(const ir::Graph& graph, const PlanResult& result) {
  const auto& blocking = result.partitioning.blocking;
  const auto& units = result.partitioning.units;
  StageMap map;
  map.stage_of_unit.assign(units.units.size(), -1);
  map.ops.resize(result.plan.stages.size());
  std::vector<int> stamp(graph.ops().size(), -1);
  for (int s = 0; s < static_cast<int>(result.plan.stages.size()); ++s) {
    const auto& option = result.plan.stages[s].option;
    for (int i = blocking.begin(option.begin); i < blocking.end(option.end - 1); ++i) {
      int unit = blocking.order[i];
      map.stage_of_unit[unit] = s;
      for (auto op : units.units[unit].ops) {
        if (stamp[op] == s) continue;
        stamp[op] = s;
        map.ops[s].push_back(op);
      }
    }
    std::sort(map.ops[s].begin(), map.ops[s].end());
  }
  return map;
}

// A tensor's shape on one replica for one microbatch: the batch dim holds `samples`.
json replica_shape(const ir::Value& value, int samples) {
  auto shape = value.type.shape;
  if (value.type.batch_dim >= 0 && value.type.batch_dim < static_cast<int>(shape.size())) shape[value.type.batch_dim] = samples;
  return shape;
}

json tensor_json(const ir::Value& value, int samples) {
  return {{"name", value.name}, {"shape", replica_shape(value, samples)}, {"dtype", std::string(ir::dtype_name(value.type.dtype))}};
}

struct StageTensors {
  std::vector<std::vector<const partition::CrossingTensor*>> inputs, outputs;  // per stage, by value id
};

StageTensors stage_tensors(const PlanResult& result, const StageMap& map) {
  std::size_t stages = result.plan.stages.size();
  StageTensors tensors{std::vector<std::vector<const partition::CrossingTensor*>>(stages),
                       std::vector<std::vector<const partition::CrossingTensor*>>(stages)};
  for (const auto& tensor : result.partitioning.units.tensors) {
    int producer = tensor.producer < 0 ? -1 : map.stage_of_unit[tensor.producer];
    std::set<int> readers;
    for (int unit : tensor.consumers)
      if (map.stage_of_unit[unit] != producer) readers.insert(map.stage_of_unit[unit]);
    for (int stage : readers) tensors.inputs[stage].push_back(&tensor);
    if (producer >= 0 && (!readers.empty() || tensor.model_output)) tensors.outputs[producer].push_back(&tensor);
  }
  auto by_value = [](const partition::CrossingTensor* a, const partition::CrossingTensor* b) { return a->value < b->value; };
  for (auto* lists : {&tensors.inputs, &tensors.outputs})
    for (auto& list : *lists) std::sort(list.begin(), list.end(), by_value);
  return tensors;
}

// The weights each stage reads, and the stages that share each (tied weights).
std::map<ir::ValueId, std::set<int>> weight_stages(const ir::Graph& graph, const StageMap& map) {
  std::map<ir::ValueId, std::set<int>> stages;
  for (int s = 0; s < static_cast<int>(map.ops.size()); ++s)
    for (auto op : map.ops[s])
      for (auto input : graph.op(op).inputs)
        if (graph.value(input).is_weight() && graph.value(input).is_tensor()) stages[input].insert(s);
  return stages;
}

json weights_json(const ir::Graph& graph, const std::map<ir::ValueId, std::set<int>>& shared, int stage, ir::ValueRole role) {
  json list = json::array();
  for (const auto& [id, stages] : shared) {
    const auto& value = graph.value(id);
    if (value.role != role || !stages.count(stage)) continue;
    json entry = {{"name", value.name}, {"numel", value.type.numel()}, {"bytes", value.type.bytes()}};
    if (role == ir::ValueRole::kParam) entry["stage_name"] = "p" + std::to_string(list.size());
    if (stages.size() > 1) {
      json others = json::array();
      for (int other : stages)
        if (other != stage) others.push_back(other);
      entry["shared_with"] = others;
    }
    list.push_back(entry);
  }
  return list;
}

std::string op_label(const ir::Graph& graph, ir::OpId id) {
  const auto& op = graph.op(id);
  return op.kind + (op.outputs.empty() ? "" : " " + graph.value(op.outputs.front()).name);
}

json stage_json(const ir::Graph& graph, const PlanResult& result, const StageMap& map, const StageTensors& tensors,
                const std::map<ir::ValueId, std::set<int>>& shared, int s) {
  const auto& stage = result.plan.stages[s];
  const auto& config = result.plan.config;
  int samples = config.microbatch_size / stage.option.replicas;
  const auto& units = result.partitioning.units;
  const auto& blocking = result.partitioning.blocking;
  json inputs = json::array(), outputs = json::array();
  for (const auto* tensor : tensors.inputs[s]) {
    json entry = tensor_json(graph.value(tensor->value), samples);
    if (tensor->producer < 0) {
      entry["source"] = {{"model_input", graph.value(tensor->value).name}};
    } else {
      int from = map.stage_of_unit[tensor->producer];
      const auto& sent = tensors.outputs[from];
      auto index = std::find(sent.begin(), sent.end(), tensor) - sent.begin();
      entry["source"] = {{"stage", from}, {"output", index}};
    }
    inputs.push_back(entry);
  }
  for (const auto* tensor : tensors.outputs[s]) {
    json entry = tensor_json(graph.value(tensor->value), samples);
    if (tensor->model_output) entry["model_output"] = true;
    outputs.push_back(entry);
  }
  int first_unit = blocking.order[blocking.begin(stage.option.begin)];
  int last_unit = blocking.order[blocking.end(stage.option.end - 1) - 1];
  return {
      {"id", s},
      {"file", "stage_" + std::to_string(s) + ".pt"},
      {"ranks", stage.ranks},
      {"replicas", stage.ranks.size()},
      {"replicas_per_pipeline", stage.option.replicas},
      {"blocks", {stage.option.begin, stage.option.end}},  // half-open [begin, end)
      {"op_range", op_label(graph, units.units[first_unit].anchor) + " .. " + op_label(graph, units.units[last_unit].anchor)},
      {"ops", map.ops[s]},
      {"inputs", inputs},
      {"outputs", outputs},
      {"params", weights_json(graph, shared, s, ir::ValueRole::kParam)},
      {"buffers", weights_json(graph, shared, s, ir::ValueRole::kBuffer)},
      {"recompute", stage.option.recompute},
      {"offload", false},
      {"predicted",
       {{"fwd_ms", stable_number(stage.option.fwd_ms)},
        {"bwd_ms", stable_number(stage.option.bwd_ms)},
        {"p2p_ms", stable_number(stage.option.p2p_ms)},
        {"allreduce_ms", stable_number(stage.allreduce_ms)},
        {"in_flight", stage.in_flight},
        {"mem_bytes", stable_number(stage.memory.total())},
        {"memory", cost::memory_to_json(stage.memory)}}},
  };
}

json ranks_json(const partition::Plan& plan) {
  json list = json::array();
  for (const auto& r : plan.ranks)
    list.push_back({{"rank", r.rank}, {"node", r.node}, {"local_rank", r.local_rank}, {"stage", r.stage}, {"replica", r.replica}});
  return list;
}

json model_json(const ir::Graph& graph, const ModelFacts& model) {
  std::int64_t params = 0, param_bytes = 0;
  for (auto id : graph.values_with_role(ir::ValueRole::kParam)) {
    params += graph.value(id).type.numel();
    param_bytes += graph.value(id).type.bytes();
  }
  return {{"path", model.path}, {"sha256", model.sha256}, {"format", model.format}, {"params", params},
          {"param_bytes", param_bytes}, {"evaluated_batch", model.evaluated_batch}};
}

}  // namespace

json plan_to_json(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                  const PlanResult& result) {
  const auto& plan = result.plan;
  StageMap map = map_stages(graph, result);
  StageTensors tensors = stage_tensors(result, map);
  auto shared = weight_stages(graph, map);
  json stages = json::array();
  for (int s = 0; s < static_cast<int>(plan.stages.size()); ++s) stages.push_back(stage_json(graph, result, map, tensors, shared, s));
  json document = {
      {"format", kPlanFormat},
      {"version", kPlanVersion},
      {"model", model_json(graph, model)},
      {"cluster", cost::cluster_to_json(request.cluster)},
      {"batch",
       {{"global", plan.global_batch},
        {"pipelines", plan.config.pipelines},
        {"microbatches", plan.config.microbatches},
        {"microbatch_size", plan.config.microbatch_size}}},
      {"schedule", std::string(cost::schedule_name(plan.config.schedule))},
      {"optimizer", std::string(cost::optimizer_name(request.optimizer))},
      {"precision", std::string(cost::precision_name(request.precision))},
      {"stages", stages},
      {"ranks", ranks_json(plan)},
      {"predicted",
       {{"iteration_ms", stable_number(plan.predicted.iteration_ms)},
        {"samples_per_s", stable_number(plan.predicted.samples_per_s)},
        {"bubble_fraction", stable_number(plan.predicted.bubble_fraction)},
        {"lower_bound_ms", stable_number(plan.predicted.lower_bound_ms)},
        {"efficiency", stable_number(plan.predicted.efficiency())},
        {"peak_mem_bytes", stable_number(plan.predicted.peak_mem_bytes)}}},
  };
  if (plan.unused_devices > 0) {
    document["unused_devices"] = {{"count", plan.unused_devices}, {"ranks", plan.unused_ranks}, {"reason", plan.unused_reason}};
  }
  return document;
}

}  // namespace rannc::emit
