#include "emit/plan_json.h"

#include <algorithm>
#include <map>
#include <set>

#include "emit/index_bound.h"
#include "support/error.h"
#include "support/input_file.h"
#include "support/stable_number.h"

namespace rannc::emit {
namespace {

using nlohmann::json;
using partition::PlanResult;

// A tensor's shape on one replica for one microbatch: the batch dim holds `samples` (when
// `samples` is negative, the shape stays as evaluated).
json replica_shape(const ir::Value& value, int samples) {
  auto shape = value.type.shape;
  if (samples >= 0 && value.type.batch_dim >= 0 && value.type.batch_dim < static_cast<int>(shape.size())) shape[value.type.batch_dim] = samples;
  return shape;
}

// batch_dim is where the runtime slices a microbatch among replicas (-1: not batched).
json tensor_json(const ir::Value& value, int samples) {
  return {{"name", value.name},
          {"shape", replica_shape(value, samples)},
          {"dtype", std::string(ir::dtype_name(value.type.dtype))},
          {"batch_dim", value.type.batch_dim}};
}

json weights_json(const ir::Graph& graph, const std::vector<StageWeight>& weights) {
  json list = json::array();
  for (const auto& weight : weights) {
    const auto& value = graph.value(weight.value);
    json entry = {{"name", value.name}, {"stage_name", weight.stage_name}, {"numel", value.type.numel()},
                  {"bytes", value.type.bytes()}};
    if (!weight.shared_with.empty()) entry["shared_with"] = weight.shared_with;
    list.push_back(entry);
  }
  return list;
}

std::string op_label(const ir::Graph& graph, ir::OpId id) {
  const auto& op = graph.op(id);
  return op.kind + (op.outputs.empty() ? "" : " " + graph.value(op.outputs.front()).name);
}

json stage_json(const ir::Graph& graph, const PlanResult& result, const StageLayout& layout) {
  int s = layout.id;
  const auto& stage = result.plan.stages[s];
  const auto& config = result.plan.config;
  int samples = config.microbatch_size / stage.option.replicas;
  const auto& units = result.partitioning.units;
  const auto& blocking = result.partitioning.blocking;
  json inputs = json::array(), outputs = json::array();
  for (const auto& input : layout.inputs) {
    json entry = tensor_json(graph.value(input.value), samples);
    if (input.from_stage < 0) {
      entry["source"] = {{"model_input", graph.value(input.value).name}};
    } else {
      entry["source"] = {{"stage", input.from_stage}, {"output", input.from_output}};
    }
    inputs.push_back(entry);
  }
  for (const auto& output : layout.outputs) {
    json entry = tensor_json(graph.value(output.value), samples);
    if (output.model_output) entry["model_output"] = true;
    outputs.push_back(entry);
  }
  int first_unit = blocking.order[blocking.begin(stage.option.begin)];
  int last_unit = blocking.order[blocking.end(stage.option.end - 1) - 1];
  return {
      {"id", s},
      {"file", layout.file},
      {"ranks", stage.ranks},
      {"replicas", stage.ranks.size()},
      {"replicas_per_pipeline", stage.option.replicas},
      {"blocks", {stage.option.begin, stage.option.end}},  // half-open [begin, end)
      {"op_range", op_label(graph, units.units[first_unit].anchor) + " .. " + op_label(graph, units.units[last_unit].anchor)},
      {"ops", layout.ops},
      {"inputs", inputs},
      {"outputs", outputs},
      {"params", weights_json(graph, layout.params)},
      {"buffers", weights_json(graph, layout.buffers)},
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
  // The example inputs the model was evaluated with, so verify can load it again; integer ones
  // carry the bound of valid indices, for tools that make inputs up.
  json inputs = json::array();
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) {
    const auto& value = graph.value(id);
    json entry = tensor_json(value, -1);
    if (!ir::is_floating_point(value.type.dtype) && value.type.dtype != ir::DType::kBool)
      entry["index_bound"] = index_bound(graph, value.name);
    inputs.push_back(entry);
  }
  return {{"path", model.path}, {"sha256", model.sha256}, {"format", model.format}, {"params", params},
          {"param_bytes", param_bytes}, {"evaluated_batch", model.evaluated_batch}, {"inputs", inputs}};
}

}  // namespace

json plan_to_json(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                  const PlanResult& result, const std::vector<StageLayout>& layouts) {
  const auto& plan = result.plan;
  json stages = json::array();
  for (const auto& layout : layouts) stages.push_back(stage_json(graph, result, layout));
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
  // nlohmann::json writes NaN and infinity as null, which no reader accepts: a prediction that
  // overflowed is an error here, not a plan.
  if (auto field = first_non_finite(document)) {
    throw InputError("plan.json: " + *field + " is not a finite number (the cluster's or the profile DB's figures are out of range)");
  }
  return document;
}

}  // namespace rannc::emit
