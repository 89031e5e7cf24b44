// plan.json from a Plan. Field names here and in plan_reader.cpp are the format
// (docs/plan-format.md); a field is optional in the reader only for plans written by hand.
#include "plan/plan_json.h"

#include "support/error.h"
#include "support/input_file.h"
#include "support/stable_number.h"

namespace rannc::plan {
namespace {

using nlohmann::json;

json tensor_json(const Tensor& tensor) {
  json entry = {{"name", tensor.name}, {"shape", tensor.shape}, {"dtype", tensor.dtype}, {"batch_dim", tensor.batch_dim}};
  if (tensor.index_bound > 0) entry["index_bound"] = tensor.index_bound;
  if (tensor.model_input) entry["source"] = {{"model_input", *tensor.model_input}};
  if (tensor.embedding) entry["source"] = {{"embedding", *tensor.embedding}};
  if (tensor.from_stage >= 0) entry["source"] = {{"stage", tensor.from_stage}, {"output", tensor.from_output}};
  if (tensor.model_output) entry["model_output"] = true;
  return entry;
}

json tensors_json(const std::vector<Tensor>& tensors) {
  json list = json::array();
  for (const auto& tensor : tensors) list.push_back(tensor_json(tensor));
  return list;
}

json weights_json(const std::vector<Weight>& weights) {
  json list = json::array();
  for (const auto& weight : weights) {
    json entry = {{"name", weight.name}, {"stage_name", weight.stage_name}, {"numel", weight.numel}, {"bytes", weight.bytes}};
    if (!weight.shared_with.empty()) entry["shared_with"] = weight.shared_with;
    list.push_back(entry);
  }
  return list;
}

json tensor_parallel_json(const TensorParallel& split) {
  json regions = json::array(), weights = json::array(), unsplit = json::array();
  for (const auto& region : split.regions) {
    json entry = {{"column_ops", region.column_ops}, {"ops", region.ops}};
    if (region.row_op >= 0) entry["row_op"] = region.row_op;
    if (region.kind != RegionKind::kLayer) entry["kind"] = region_kind_name(region.kind);
    if (!region.module.empty()) entry["module"] = region.module;
    regions.push_back(entry);
  }
  for (const auto& weight : split.weights) {
    json entry = {{"name", weight.name}, {"dim", weight.dim}};
    if (weight.groups > 1) entry["groups"] = weight.groups;
    weights.push_back(entry);
  }
  for (const auto& left : split.unsplit) unsplit.push_back({{"column_ops", left.column_ops}, {"reason", left.reason}});
  json entry = {{"degree", split.degree},
                {"regions", regions},
                {"sequence_ops", split.sequence_ops},
                {"weights", weights},
                {"unsplit", unsplit}};
  if (!split.files.empty()) {
    json files = json::array();
    for (const auto& file : split.files) {
      json one = {{"file", file.file}};
      if (!file.sha256.empty()) one["sha256"] = file.sha256;
      files.push_back(one);
    }
    entry["files"] = files;
  }
  return entry;
}

json stage_json(const Stage& stage) {
  const auto& p = stage.predicted;
  json entry = {
      {"id", stage.id},
      {"file", stage.file},
      {"ranks", stage.ranks},
      {"replicas", stage.replicas()},
      {"replicas_per_pipeline", stage.replicas_per_pipeline},
      {"ops", stage.ops},
      {"inputs", tensors_json(stage.inputs)},
      {"outputs", tensors_json(stage.outputs)},
      {"params", weights_json(stage.params)},
      {"buffers", weights_json(stage.buffers)},
      {"recompute", stage.recompute},
      {"offload", stage.offload},
      {"state_sharding", stage.state_sharding},
      {"predicted",
       {{"fwd_ms", stable_number(p.fwd_ms)},
        {"bwd_ms", stable_number(p.bwd_ms)},
        {"p2p_ms", stable_number(p.p2p_ms)},
        {"allreduce_ms", stable_number(p.allreduce_ms)},
        {"offload_ms", stable_number(p.offload_ms)},
        {"in_flight", p.in_flight},
        {"mem_bytes", stable_number(p.mem_bytes)},
        {"memory", memory_to_json(p.memory)},
        {"host_mem_bytes", stable_number(p.host_mem_bytes)}}},
  };
  if (p.mem_limit_bytes > 0) entry["predicted"]["mem_limit_bytes"] = p.mem_limit_bytes;
  if (!stage.sha256.empty()) entry["sha256"] = stage.sha256;
  if (!stage.blocks.empty()) entry["blocks"] = stage.blocks;  // half-open [begin, end)
  if (!stage.op_range.empty()) entry["op_range"] = stage.op_range;
  if (!stage.modules.empty()) entry["modules"] = stage.modules;
  if (!stage.replica_samples.empty()) entry["replica_samples"] = stage.replica_samples;
  if (stage.tensor_parallel.degree > 1) entry["tensor_parallel"] = tensor_parallel_json(stage.tensor_parallel);
  if (stage.context_degree > 1) entry["context_parallel"] = {{"degree", stage.context_degree}};
  return entry;
}

json model_json(const Model& model) {
  return {{"path", model.path},     {"sha256", model.sha256},           {"format", model.format},
          {"params", model.params}, {"param_bytes", model.param_bytes}, {"evaluated_batch", model.evaluated_batch},
          {"inputs", tensors_json(model.inputs)}};
}

json link_json(const Link& link) {
  return {{"bandwidth_gbps", stable_number(link.bandwidth_gbps)}, {"latency_us", stable_number(link.latency_us)}};
}

json host_json(const Host& host) {
  return {{"mem_bytes", host.mem_bytes}, {"link", link_json(host.link)}, {"mem_bandwidth_gbps", stable_number(host.mem_bandwidth_gbps)}};
}

json cluster_json(const Cluster& cluster) {
  json entry = {{"gpus", cluster.gpus},
                {"nodes", cluster.nodes},
                {"gpus_per_node", cluster.gpus_per_node},
                {"mem_bytes", cluster.mem_bytes},
                {"device", cluster.device}};
  if (cluster.intra_node) entry["intra_node"] = link_json(*cluster.intra_node);
  if (cluster.inter_node) entry["inter_node"] = link_json(*cluster.inter_node);
  if (cluster.host) entry["host"] = host_json(*cluster.host);
  if (!cluster.node_groups.empty()) {
    json groups = json::array();
    for (const auto& group : cluster.node_groups) {
      json item = {{"nodes", group.nodes}, {"device", group.device}, {"mem_bytes", group.mem_bytes},
                   {"intra_node", link_json(group.intra_node)}};
      if (group.host) item["host"] = host_json(*group.host);
      groups.push_back(item);
    }
    entry["node_groups"] = groups;
  }
  return entry;
}

json ranks_json(const std::vector<RankPlacement>& ranks) {
  json list = json::array();
  for (const auto& r : ranks) {
    json entry = {{"rank", r.rank}, {"node", r.node}, {"local_rank", r.local_rank}, {"stage", r.stage}, {"replica", r.replica}};
    if (r.tensor_rank > 0) entry["tensor_rank"] = r.tensor_rank;
    if (r.context_rank > 0) entry["context_rank"] = r.context_rank;
    if (!r.device.empty()) entry["device"] = r.device;
    list.push_back(entry);
  }
  return list;
}

json shard_load_json(const ShardLoad& load) {
  return {{"lookup_ms", stable_number(load.lookup_ms)},
          {"all_to_all_ms", stable_number(load.all_to_all_ms)},
          {"allreduce_ms", stable_number(load.allreduce_ms)},
          {"mem_bytes", stable_number(load.mem_bytes)},
          {"host_mem_bytes", stable_number(load.host_mem_bytes)}};
}

json sharded_table_json(const ShardedTable& table, const Sharding& sharding) {
  json shards = json::array();
  for (const auto& s : table.shards)
    shards.push_back({{"rank", s.rank}, {"rows", {s.row_begin, s.row_begin + s.rows}}, {"cols", {s.col_begin, s.col_begin + s.cols}}});
  json entry = {{"name", table.name},
          {"rows", table.rows},
          {"dim", table.dim},
          {"dtype", table.dtype},
          {"pooling_mode", table.pooling_mode},
          {"pooling", stable_number(table.pooling)},
          {"indexed_by", table.indexed_by},
          {"type", table.type},
          {"tier", table.tier},
          {"comm_dtype", sharding.comm_dtype},
          {"comm_dtype_bwd", sharding.comm_dtype_bwd},
          {"shards", shards},
          {"predicted_per_rank", shard_load_json(table.per_rank)}};
  if (!table.stage_name.empty()) entry["stage_name"] = table.stage_name;
  if (!table.lookup_args.empty()) entry["lookup_args"] = table.lookup_args;
  if (table.tier == "host") {
    entry["cache_fraction"] = stable_number(table.cache_fraction);
    entry["hit_rate"] = stable_number(table.hit_rate);
  }
  return entry;
}

json plan_file_json(const PlanFile& file) { return {{"file", file.file}, {"sha256", file.sha256}}; }

json sharding_files_json(const ShardingFiles& files) {
  json shards = json::array();
  for (std::size_t r = 0; r < files.shards.size(); ++r) {
    auto entry = plan_file_json(files.shards[r]);
    entry["rank"] = r;
    shards.push_back(entry);
  }
  auto indices = plan_file_json(files.indices);
  indices["inputs"] = files.index_inputs;
  return {{"indices", indices}, {"tables", plan_file_json(files.tables)}, {"shards", shards}};
}

json sharding_json(const Sharding& sharding) {
  json tables = json::array(), ranks = json::array();
  for (const auto& table : sharding.tables) tables.push_back(sharded_table_json(table, sharding));
  for (const auto& r : sharding.ranks) {
    ranks.push_back({{"rank", r.rank},
                     {"lookup_ms", stable_number(r.lookup_ms)},
                     {"all_to_all_ms", stable_number(r.all_to_all_ms)},
                     {"allreduce_ms", stable_number(r.allreduce_ms)},
                     {"dense_ms", stable_number(r.dense_ms)},
                     {"step_ms", stable_number(r.step_ms)},
                     {"mem_bytes", stable_number(r.mem_bytes)},
                     {"host_mem_bytes", stable_number(r.host_mem_bytes)}});
  }
  json section = {{"batch_per_rank", sharding.batch_per_rank}, {"comm_dtype", sharding.comm_dtype},
                  {"comm_dtype_bwd", sharding.comm_dtype_bwd}, {"sparse_optimizer", sharding.sparse_optimizer},
                  {"tables", tables},                          {"ranks", ranks}};
  if (sharding.files) section["files"] = sharding_files_json(*sharding.files);
  return section;
}

}  // namespace

json memory_to_json(const MemoryBreakdown& m) {
  return {{"weights", stable_number(m.weights)},     {"grads", stable_number(m.grads)},
          {"optimizer", stable_number(m.optimizer)}, {"activations", stable_number(m.activations)},
          {"workspace", stable_number(m.workspace)}, {"comm_buffers", stable_number(m.comm_buffers)},
          {"step_buffers", stable_number(m.step_buffers)}, {"total", stable_number(m.total())}};
}

json prediction_to_json(const Prediction& p) {
  return {{"iteration_ms", stable_number(p.iteration_ms)},     {"samples_per_s", stable_number(p.samples_per_s)},
          {"bubble_fraction", stable_number(p.bubble_fraction)}, {"lower_bound_ms", stable_number(p.lower_bound_ms)},
          {"efficiency", stable_number(p.efficiency)},         {"peak_mem_bytes", stable_number(p.peak_mem_bytes)},
          {"flop_bound_ms", stable_number(p.flop_bound_ms)},
          {"model_tflops_per_device", stable_number(p.model_tflops_per_device)},
          {"peak_fraction", stable_number(p.peak_fraction)}};
}

json generator_to_json(const Generator& g) { return {{"tool", g.tool}, {"version", g.version}, {"command", g.command}}; }

json to_json(const Plan& plan) {
  json stages = json::array();
  for (const auto& stage : plan.stages) stages.push_back(stage_json(stage));
  json document = {
      {"format", kFormat},
      {"version", kVersion},
      {"model", model_json(plan.model)},
      {"cluster", cluster_json(plan.cluster)},
      {"batch",
       {{"global", plan.batch.global},
        {"pipelines", plan.batch.pipelines},
        {"microbatches", plan.batch.microbatches},
        {"microbatch_size", plan.batch.microbatch_size}}},
      {"schedule", plan.schedule},
      {"optimizer", plan.optimizer},
      {"precision", plan.precision},
      {"stages", stages},
      {"ranks", ranks_json(plan.ranks)},
      {"predicted", prediction_to_json(plan.predicted)},
  };
  if (plan.interleave > 1) document["interleave"] = plan.interleave;  // absent: 1, and plans stay as they were
  add_fused_kernels(document, plan.attention, plan.elementwise);
  if (plan.sharding) document["sharding"] = sharding_json(*plan.sharding);
  if (plan.generator) document["generator"] = generator_to_json(*plan.generator);
  if (!plan.unused.ranks.empty()) {
    document["unused_devices"] = {{"count", plan.unused.ranks.size()}, {"ranks", plan.unused.ranks}, {"reason", plan.unused.reason}};
  }
  // nlohmann::json writes NaN and infinity as null, which no reader accepts: a prediction that
  // overflowed is an error here, not a plan.
  if (auto field = first_non_finite(document)) {
    throw InputError("plan.json: " + *field + " is not a finite number (the cluster's or the profile DB's figures are out of range)");
  }
  return document;
}

std::string to_text(const Plan& plan) { return to_json(plan).dump(1) + "\n"; }

}  // namespace rannc::plan
