#include "emit/plan_builder.h"

#include "emit/index_bound.h"

namespace rannc::emit {
namespace {

// A tensor's shape on one replica for one microbatch: the batch dim holds `samples` (when
// `samples` is negative, the shape stays as evaluated).
plan::Tensor plan_tensor(const ir::Value& value, int samples) {
  plan::Tensor tensor;
  tensor.name = value.name;
  tensor.shape = value.type.shape;
  tensor.batch_dim = value.type.batch_dim;
  if (samples >= 0 && tensor.batch_dim >= 0 && tensor.batch_dim < static_cast<int>(tensor.shape.size()))
    tensor.shape[tensor.batch_dim] = samples;
  tensor.dtype = std::string(ir::dtype_name(value.type.dtype));
  return tensor;
}

std::vector<plan::Weight> plan_weights(const ir::Graph& graph, const std::vector<StageWeight>& weights) {
  std::vector<plan::Weight> list;
  for (const auto& weight : weights) {
    const auto& value = graph.value(weight.value);
    list.push_back({value.name, weight.stage_name, value.type.numel(), value.type.bytes(), weight.shared_with});
  }
  return list;
}

std::string op_label(const ir::Graph& graph, ir::OpId id) {
  const auto& op = graph.op(id);
  return op.kind + (op.outputs.empty() ? "" : " " + graph.value(op.outputs.front()).name);
}

// "first op .. last op" of the stage's blocks.
std::string op_range(const ir::Graph& graph, const partition::Partitioning& partitioning, const partition::StageOption& option) {
  const auto& blocking = partitioning.blocking;
  const auto& units = partitioning.units.units;
  int first_unit = blocking.order[blocking.begin(option.begin)];
  int last_unit = blocking.order[blocking.end(option.end - 1) - 1];
  return op_label(graph, units[first_unit].anchor) + " .. " + op_label(graph, units[last_unit].anchor);
}

plan::Stage plan_stage(const ir::Graph& graph, const partition::PlanResult& result, const StageLayout& layout) {
  const auto& planned = result.pipeline.stages[layout.id];
  const auto& option = planned.option;
  int samples = result.pipeline.config.microbatch_size / option.replicas;
  plan::Stage stage;
  stage.id = layout.id;
  stage.file = layout.file;
  stage.ranks = planned.ranks;
  stage.replicas_per_pipeline = option.replicas;
  stage.blocks = {option.begin, option.end};
  stage.op_range = op_range(graph, result.partitioning, option);
  stage.ops = layout.ops;
  for (const auto& input : layout.inputs) {
    stage.inputs.push_back(plan_tensor(graph.value(input.value), samples));
    auto& tensor = stage.inputs.back();
    if (input.from_stage < 0) tensor.model_input = tensor.name;
    tensor.from_stage = input.from_stage;
    tensor.from_output = input.from_output;
  }
  for (const auto& output : layout.outputs) {
    stage.outputs.push_back(plan_tensor(graph.value(output.value), samples));
    stage.outputs.back().model_output = output.model_output;
  }
  stage.params = plan_weights(graph, layout.params);
  stage.buffers = plan_weights(graph, layout.buffers);
  stage.recompute = option.recompute;
  stage.state_sharding = option.sharding;
  stage.offload = option.offload;
  stage.predicted = {option.fwd_ms,      option.bwd_ms,           option.p2p_ms,  planned.allreduce_ms, option.offload_ms,
                     planned.in_flight, planned.memory.total(), planned.memory, planned.host_mem_bytes};
  return stage;
}

plan::Model plan_model_facts(const ir::Graph& graph, const ModelFacts& facts) {
  plan::Model model{facts.path, facts.sha256, facts.format, 0, 0, facts.evaluated_batch, {}};
  for (auto id : graph.values_with_role(ir::ValueRole::kParam)) {
    model.params += graph.value(id).type.numel();
    model.param_bytes += graph.value(id).type.bytes();
  }
  // The example inputs the model was evaluated with, so verify can load it again; integer ones
  // carry the bound of valid indices, for tools that make inputs up.
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) {
    const auto& value = graph.value(id);
    model.inputs.push_back(plan_tensor(value, -1));
    if (!ir::is_floating_point(value.type.dtype) && value.type.dtype != ir::DType::kBool)
      model.inputs.back().index_bound = index_bound(graph, value.name);
  }
  return model;
}

plan::Link plan_link(const cost::Link& link) { return {link.bandwidth / 1e9, link.latency / 1e-6}; }

}  // namespace

plan::Cluster plan_cluster(const cost::Cluster& cluster) {
  plan::Cluster out{cluster.gpus(),       cluster.nodes,
                    cluster.gpus_per_node, cluster.mem_bytes,
                    cluster.device.name,  plan_link(cluster.intra_node),
                    plan_link(cluster.inter_node), std::nullopt};
  if (cluster.host.mem_bytes > 0)
    out.host = plan::Host{cluster.host.mem_bytes, plan_link(cluster.host.link), cluster.host.mem_bandwidth / 1e9};
  return out;
}

plan::Plan build_plan(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                      const partition::PlanResult& result, const std::vector<StageLayout>& layouts) {
  const auto& pipeline = result.pipeline;
  plan::Plan plan;
  plan.model = plan_model_facts(graph, model);
  plan.cluster = plan_cluster(request.cluster);
  plan.batch = {pipeline.global_batch, pipeline.config.pipelines, pipeline.config.microbatches,
                pipeline.config.microbatch_size};
  plan.schedule = pipeline.config.schedule;
  plan.optimizer = request.optimizer;
  plan.precision = request.precision;
  for (const auto& layout : layouts) plan.stages.push_back(plan_stage(graph, result, layout));
  plan.ranks = pipeline.ranks;
  plan.predicted = pipeline.predicted;
  plan.unused = {pipeline.unused_ranks, pipeline.unused_reason};
  return plan;
}

}  // namespace rannc::emit
