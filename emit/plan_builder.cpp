#include "emit/plan_builder.h"

#include "emit/index_bound.h"
#include "ir/module_path.h"

#include <algorithm>
#include <functional>
#include <map>

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

// The module all of a region's matrix products belong to: their paths' longest common prefix of
// whole names ("layers.3.mlp" of layers.3.mlp.fc1 and layers.3.mlp.fc2).
std::string region_module(const ir::Graph& graph, const partition::TensorRegion& region) {
  std::vector<ir::OpId> anchors = region.column_ops;
  if (region.row_op != ir::kNoId) anchors.push_back(region.row_op);
  std::string common = graph.module_path(anchors.front());
  for (auto op : anchors) {
    const std::string& path = graph.module_path(op);
    std::size_t same = 0;
    while (same < common.size() && same < path.size() && common[same] == path[same]) ++same;
    if (same < common.size() && !(same == path.size() && common[same] == '.')) same = common.rfind('.', same);
    common = common.substr(0, same == std::string::npos ? 0 : same);
  }
  return common;
}

// What a stage of tensor-parallel degree > 1 splits: the regions of its layout's shard (whose
// anchor it computes and that allow the degree), their weights, its ranks' files, and the
// candidates it leaves whole with why.
plan::TensorParallel plan_tensor_parallel(const ir::Graph& graph, const partition::TensorRegions& found,
                                          const StageLayout& layout) {
  const auto& shard = layout.tensor_shard;
  plan::TensorParallel split;
  split.degree = shard.degree;
  std::set<ir::ValueId> weights_split;  // a tied weight splits once though two regions read it
  for (const auto& region : shard.regions) {
    split.regions.push_back({region.kind, region_module(graph, region),
                             {region.column_ops.begin(), region.column_ops.end()},
                             {region.ops.begin(), region.ops.end()}, region.row_op == ir::kNoId ? -1 : region.row_op});
    for (const auto& weight : region.weights)
      if (weights_split.insert(weight.weight).second)
        split.weights.push_back({graph.value(weight.weight).name, weight.dim, weight.groups});
  }
  for (const auto& file : shard.files) split.files.push_back({file, ""});
  const auto& stage_ops = layout.ops;
  auto in_stage = [&](ir::OpId op) { return std::binary_search(stage_ops.begin(), stage_ops.end(), op); };
  for (const auto& region : found.regions)
    if (in_stage(region.anchor()) && !region.allows(shard.degree))
      split.unsplit.push_back({{region.column_ops.begin(), region.column_ops.end()},
                               "its split dims (heads, features) have " + std::to_string(region.divisor) +
                                   " as greatest common divisor, which " + std::to_string(shard.degree) + " does not divide"});
  split.sequence_ops.assign(shard.sequence_ops.begin(), shard.sequence_ops.end());
  for (const auto& rejected : found.rejected)
    if (!rejected.column_ops.empty() && in_stage(rejected.column_ops.front()))
      split.unsplit.push_back({{rejected.column_ops.begin(), rejected.column_ops.end()}, rejected.reason});
  return split;
}

// The ops a stage is named by (plan::Stage::modules): the batch ops its blocks hold, in the
// blocks' order, without the glue each stage recomputes for itself (a mask, a size), which may
// come from modules far before it.
std::vector<ir::OpId> naming_ops(const partition::Partitioning& partitioning, const partition::StageOption& option) {
  const auto& blocking = partitioning.blocking;
  std::vector<ir::OpId> anchors;
  for (int i = blocking.begin(option.begin); i < blocking.end(option.end - 1); ++i)
    anchors.push_back(partitioning.units.units[static_cast<std::size_t>(blocking.order[static_cast<std::size_t>(i)])].anchor);
  return anchors;
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
  // Unequal shares only: equal ones are what replicas_per_pipeline already says.
  for (const auto& share : option.shares) stage.replica_samples.insert(stage.replica_samples.end(), share.replicas, share.samples);
  if (std::adjacent_find(stage.replica_samples.begin(), stage.replica_samples.end(), std::not_equal_to<>()) ==
      stage.replica_samples.end())
    stage.replica_samples.clear();
  stage.blocks = {option.begin, option.end};
  stage.op_range = op_range(graph, result.partitioning, option);
  stage.ops = layout.ops;
  stage.modules = ir::module_blocks(graph, naming_ops(result.partitioning, option));
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
  if (layout.tensor_shard.degree > 1)
    stage.tensor_parallel = plan_tensor_parallel(graph, result.partitioning.regions, layout);
  stage.context_degree = option.context_degree;
  stage.predicted = {option.fwd_ms,      option.bwd_ms,           option.p2p_ms,  planned.allreduce_ms, option.offload_ms,
                     planned.in_flight, planned.memory.total(), planned.memory, planned.host_mem_bytes,
                     planned.mem_limit_bytes};
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
  auto host = [](const cost::HostSpec& spec) -> std::optional<plan::Host> {
    if (spec.mem_bytes <= 0) return std::nullopt;
    return plan::Host{spec.mem_bytes, plan_link(spec.link), spec.mem_bandwidth / 1e9};
  };
  out.host = host(cluster.host);
  if (!cluster.mixed()) return out;
  // Each kind's memory, link and host are its group's.
  out.device = cluster.device_names();
  out.mem_bytes = cluster.least_mem_bytes();
  out.intra_node.reset();
  out.host.reset();
  for (const auto& group : cluster.groups)
    out.node_groups.push_back({group.nodes, group.device.name, group.mem_bytes, plan_link(group.intra_node), host(group.host)});
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
  plan.interleave = pipeline.config.chunks;
  plan.optimizer = request.optimizer;
  plan.precision = request.precision;
  plan.attention = request.attention;
  plan.elementwise = request.elementwise;
  for (const auto& layout : layouts) plan.stages.push_back(plan_stage(graph, result, layout));
  plan.ranks = pipeline.ranks;
  plan.predicted = pipeline.predicted;
  plan.unused = {pipeline.unused_ranks, pipeline.unused_reason};
  return plan;
}

namespace {

plan::Sharding plan_sharding_section(const ShardedModel& sharded) {
  const auto& problem = sharded.problem;
  plan::Sharding section;
  section.batch_per_rank = problem.batch_per_rank;
  section.comm_dtype = sharded.comm_dtype;
  section.comm_dtype_bwd = sharded.comm_dtype_bwd;
  section.sparse_optimizer = sharding::sparse_optimizer_name(problem.optimizer);
  for (std::size_t t = 0; t < sharded.tables.size(); ++t) {
    const auto& table = sharded.tables[t];
    const auto& placed = sharded.solution.tables[t];
    plan::ShardedTable entry;
    entry.name = table.weight;
    entry.rows = table.rows;
    entry.dim = table.dim;
    entry.dtype = std::string(ir::dtype_name(table.dtype));
    entry.pooling_mode = table.pooling_mode;
    entry.pooling = table.pooling;
    entry.indexed_by = table.indexed_by;
    entry.type = sharding::sharding_type_name(placed.type);
    entry.tier = placed.host ? "host" : "device";
    entry.cache_fraction = placed.cache_fraction;
    entry.hit_rate = placed.hit_rate;
    for (const auto& s : placed.shards) entry.shards.push_back({s.rank, s.row_begin, s.rows, s.col_begin, s.cols});
    const auto& l = placed.load;
    entry.per_rank = {l.lookup_ms, l.all_to_all_ms, l.allreduce_ms, l.mem_bytes, l.host_bytes};
    section.tables.push_back(std::move(entry));
  }
  for (std::size_t r = 0; r < sharded.solution.ranks.size(); ++r) {
    const auto& l = sharded.solution.ranks[r];
    section.ranks.push_back({static_cast<int>(r), l.lookup_ms, l.all_to_all_ms, l.allreduce_ms, l.dense_ms, l.step_ms(), l.mem_bytes,
                             l.host_bytes});
  }
  return section;
}

// The dense part on every rank, reading the model's dense inputs and the tables' pooled lookups.
plan::Stage dense_stage(const ir::Graph& graph, const StageLayout& layout, const ShardedModel& sharded, int world) {
  std::map<ir::ValueId, const sharding::EmbeddingTable*> pooled_from;
  for (const auto& table : sharded.tables)
    for (auto v : table.pooled) pooled_from[v] = &table;
  const auto samples = static_cast<int>(sharded.problem.batch_per_rank);
  plan::Stage stage;
  stage.file = layout.file;
  for (int r = 0; r < world; ++r) stage.ranks.push_back(r);
  stage.replicas_per_pipeline = world;
  stage.ops = layout.ops;
  if (!layout.ops.empty()) stage.op_range = op_label(graph, layout.ops.front()) + " .. " + op_label(graph, layout.ops.back());
  std::vector<ir::OpId> batch_ops;  // as naming_ops: not the glue recomputed here
  for (auto id : layout.ops) {
    const auto& outputs = graph.op(id).outputs;
    if (std::any_of(outputs.begin(), outputs.end(),
                    [&](ir::ValueId v) { return graph.value(v).is_tensor() && graph.value(v).data_dependent; }))
      batch_ops.push_back(id);
  }
  stage.modules = ir::module_blocks(graph, batch_ops);
  for (const auto& input : layout.inputs) {
    stage.inputs.push_back(plan_tensor(graph.value(input.value), samples));
    auto& tensor = stage.inputs.back();
    auto table = pooled_from.find(input.value);
    if (table == pooled_from.end()) {
      tensor.model_input = tensor.name;
      continue;
    }
    tensor.embedding = table->second->weight;
    // A bag of lookups pools to one row per sample, whatever shape a frontend could not infer
    // (the Loop ONNX exports EmbeddingBag as).
    if (std::any_of(tensor.shape.begin(), tensor.shape.end(), [](std::int64_t d) { return d < 0; }) || tensor.batch_dim < 0) {
      tensor.shape = {samples, table->second->dim};
      tensor.batch_dim = 0;
    }
  }
  for (const auto& output : layout.outputs) {
    stage.outputs.push_back(plan_tensor(graph.value(output.value), samples));
    stage.outputs.back().model_output = true;
  }
  stage.params = plan_weights(graph, layout.params);
  stage.buffers = plan_weights(graph, layout.buffers);
  const auto& dense = sharded.dense;
  stage.predicted = {dense.fwd_ms, dense.bwd_ms, 0, dense.allreduce_ms, 0, 1, dense.memory.total(), dense.memory, 0, 0};
  return stage;
}

}  // namespace

plan::Plan build_sharded_plan(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                              const StageLayout& dense_layout, const ShardedModel& sharded) {
  const auto& cluster = request.cluster;
  const int world = cluster.gpus();
  plan::Plan plan;
  plan.model = plan_model_facts(graph, model);
  plan.cluster = plan_cluster(cluster);
  const std::int64_t global = sharded.problem.batch_per_rank * world;
  plan.batch = {global, 1, 1, static_cast<int>(global)};
  plan.optimizer = request.optimizer;
  plan.precision = request.precision;  // unfused: run_partition refuses fused kernels for sharded plans
  plan.stages.push_back(dense_stage(graph, dense_layout, sharded, world));
  for (int r = 0; r < world; ++r) plan.ranks.push_back({r, r / cluster.gpus_per_node, r % cluster.gpus_per_node, 0, r});
  plan.sharding = plan_sharding_section(sharded);
  // The step is the slowest rank's; perfect balance (every rank at the mean) bounds it below.
  auto& p = plan.predicted;
  double total = 0;
  for (const auto& r : plan.sharding->ranks) {
    total += r.step_ms;
    p.iteration_ms = std::max(p.iteration_ms, r.step_ms);
    p.peak_mem_bytes = std::max(p.peak_mem_bytes, r.mem_bytes);
  }
  p.lower_bound_ms = total / world;
  p.efficiency = p.iteration_ms > 0 ? p.lower_bound_ms / p.iteration_ms : 1;
  p.samples_per_s = p.iteration_ms > 0 ? static_cast<double>(global) / (p.iteration_ms / 1e3) : 0;
  return plan;
}

}  // namespace rannc::emit
