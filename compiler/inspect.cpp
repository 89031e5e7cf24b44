#include "compiler/inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "cost_model/op_work.h"
#include "cost_model/step_estimate.h"
#include "partitioner/tensor_regions.h"
#include "ir/dump.h"
#include "plan/plan_json.h"
#include "sharding/embedding_tables.h"
#include "support/format.h"

namespace rannc {
namespace {

struct Totals {
  std::int64_t params = 0, param_bytes = 0, buffers = 0, buffer_bytes = 0;
  double flops_fwd = 0;
  std::map<std::string, int> ops;
  std::set<std::string> uncosted_kinds;  // kinds the cost model has no formula for
};

Totals totals(const ir::Graph& graph) {
  Totals t;
  for (const auto& v : graph.values()) {
    if (v.role == ir::ValueRole::kParam) {
      t.params += v.type.numel();
      t.param_bytes += v.type.bytes();
    } else if (v.role == ir::ValueRole::kBuffer) {
      t.buffers += v.type.numel();
      t.buffer_bytes += v.type.bytes();
    }
  }
  for (const auto& op : graph.ops()) {
    ++t.ops[op.kind];
    t.flops_fwd += cost::op_work(graph, op).flops_fwd;
  }
  auto uncosted = cost::uncosted_kinds(graph);
  t.uncosted_kinds.insert(uncosted.begin(), uncosted.end());
  return t;
}

nlohmann::json tensor_list(const ir::Graph& graph, const std::vector<ir::ValueId>& ids) {
  nlohmann::json list = nlohmann::json::array();
  for (auto id : ids) {
    const auto& v = graph.value(id);
    nlohmann::json shape = v.is_tensor() && v.type.rank_known ? nlohmann::json(v.type.shape) : nlohmann::json(nullptr);
    std::string dtype = v.is_tensor() ? std::string(ir::dtype_name(v.type.dtype)) : std::string(ir::value_kind_name(v.kind));
    list.push_back({{"name", v.name}, {"shape", shape}, {"dtype", dtype}});
  }
  return list;
}

void print_values(std::ostringstream& out, const char* label, const ir::Graph& graph, const std::vector<ir::ValueId>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& v = graph.value(ids[i]);
    std::string type = v.is_tensor() ? ir::type_to_string(v.type) : std::string(ir::value_kind_name(v.kind));
    out << (i == 0 ? label : "") << std::string(i == 0 ? 11 - std::string(label).size() : 11, ' ') << v.name << "  "
        << type << "\n";
  }
}

cost::StepEstimate estimate(const Model& model, const CostQuery& query) {
  const cost::ProfileDb* db = query.profile_db ? &*query.profile_db : nullptr;
  std::vector<cost::FusedKernel> fused;
  if (query.attention == plan::Fusion::kFused || query.elementwise == plan::Fusion::kFused)
    fused = partition::fused_kernels(model.graph, partition::find_tensor_regions(model.graph), query.attention, query.elementwise);
  return cost::estimate_step(model.graph, query.device, query.precision, query.optimizer, db, std::move(fused));
}

nlohmann::json predicted_json(const Model& model, const CostQuery& query) {
  auto e = estimate(model, query);
  nlohmann::json by_class = nlohmann::json::object();
  for (std::size_t i = 0; i < cost::kOpClassCount; ++i) {
    if (e.ms_by_class[i] > 0) by_class[std::string(cost::op_class_name(static_cast<cost::OpClass>(i)))] = e.ms_by_class[i];
  }
  nlohmann::json json{{"device", query.device.name},
                      {"device_description", query.device.description},
                      {"precision", plan::precision_name(query.precision)},
                      {"optimizer", plan::optimizer_name(query.optimizer)},
                      {"calibration", e.calibration},
                      {"fwd_ms", e.fwd_ms},
                      {"bwd_ms", e.bwd_ms},
                      {"step_ms", e.fwd_ms + e.bwd_ms},
                      {"ms_by_class", by_class},
                      {"measured_ops", e.measured_ops},
                      {"memory_bytes", plan::memory_to_json(e.memory)}};
  plan::add_fused_kernels(json, query.attention, query.elementwise);
  return json;
}

std::string predicted_text(const Model& model, const CostQuery& query) {
  auto e = estimate(model, query);
  std::ostringstream out;
  out << "\npredicted training step on one " << query.device.name << " (" << plan::precision_name(query.precision) << ", "
      << plan::optimizer_name(query.optimizer) << plan::fused_kernels_label(query.attention, query.elementwise)
      << ", efficiencies: " << e.calibration << ")\n"
      << "  device   " << query.device.description << "\n"
      << "  time     " << human_ms(e.fwd_ms + e.bwd_ms) << "  (forward " << human_ms(e.fwd_ms) << ", backward "
      << human_ms(e.bwd_ms) << ")\n"
      << "  memory   " << human_bytes(e.memory.total()) << "  (weights " << human_bytes(e.memory.weights) << ", grads "
      << human_bytes(e.memory.grads) << ", optimizer " << human_bytes(e.memory.optimizer) << ", activations "
      << human_bytes(e.memory.activations) << ", workspace " << human_bytes(e.memory.workspace) << "; then the optimizer step "
      << human_bytes(e.memory.step_buffers) << ")\n";
  return out.str();
}

nlohmann::json tables_json(const std::vector<sharding::EmbeddingTable>& tables) {
  auto json = nlohmann::json::array();
  for (const auto& t : tables) {
    json.push_back({{"weight", t.weight}, {"rows", t.rows}, {"dim", t.dim}, {"dtype", ir::dtype_name(t.dtype)},
                    {"pooling_mode", t.pooling_mode}, {"pooling", t.pooling}, {"indexed_by", t.indexed_by}});
  }
  return json;
}

void print_tables(std::ostringstream& out, const std::vector<sharding::EmbeddingTable>& tables) {
  if (tables.empty()) return;
  char line[160];
  std::snprintf(line, sizeof line, "  %-40s %11s %6s  %-7s  %14s  %s\n", "weight", "rows", "dim", "pooling",
                "lookups/sample", "indexed by");
  out << "\n  embedding tables (" << tables.size() << ")\n" << line;
  for (const auto& t : tables) {
    std::snprintf(line, sizeof line, "  %-40s %11lld %6lld  %-7s  %14.2f  ", t.weight.c_str(),
                  static_cast<long long>(t.rows), static_cast<long long>(t.dim), t.pooling_mode.c_str(), t.pooling);
    std::string inputs;
    for (const auto& name : t.indexed_by) inputs += (inputs.empty() ? "" : ", ") + name;
    out << line << inputs << "\n";
  }
}

}  // namespace

nlohmann::json inspect_json(const Model& model, const CostQuery* cost) {
  const auto& graph = model.graph;
  Totals t = totals(graph);
  nlohmann::json json = {{"model", model.path},
          {"format", model_format_name(model.format)},
          {"batch", model.batch},
          {"nodes", graph.ops().size()},
          {"params", t.params},
          {"param_bytes", t.param_bytes},
          {"buffers", t.buffers},
          {"buffer_bytes", t.buffer_bytes},
          {"inputs", tensor_list(graph, graph.values_with_role(ir::ValueRole::kModelInput))},
          {"outputs", tensor_list(graph, graph.model_outputs())},
          {"ops", t.ops},
          {"flops_fwd", t.flops_fwd},
          {"uncosted_ops", t.uncosted_kinds},
          {"embedding_tables", tables_json(sharding::find_embedding_tables(graph, model.batch))}};
  if (cost) json["predicted"] = predicted_json(model, *cost);
  return json;
}

std::string inspect_text(const Model& model, const CostQuery* cost) {
  const auto& graph = model.graph;
  Totals t = totals(graph);
  std::ostringstream out;
  out << "model      " << model.path << " (" << model_format_name(model.format) << ")\n"
      << "batch      " << model.batch << "  (the starred dim of each shape)\n"
      << "nodes      " << graph.ops().size() << "\n"
      << "params     " << with_commas(t.params) << "  (" << human_bytes(static_cast<double>(t.param_bytes)) << ")\n"
      << "buffers    " << with_commas(t.buffers) << "  (" << human_bytes(static_cast<double>(t.buffer_bytes)) << ")\n"
      << "flops_fwd  " << human_flops(t.flops_fwd) << "\n";
  print_values(out, "inputs", graph, graph.values_with_role(ir::ValueRole::kModelInput));
  print_values(out, "outputs", graph, graph.model_outputs());

  std::vector<std::pair<std::string, int>> ops(t.ops.begin(), t.ops.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  out << "\n  count  op\n";
  for (const auto& [kind, count] : ops) {
    char line[32];
    std::snprintf(line, sizeof line, "%7d  ", count);
    out << line << kind << (t.uncosted_kinds.count(kind) ? "  (no cost formula: costed as memory-bound)" : "") << "\n";
  }
  print_tables(out, sharding::find_embedding_tables(graph, model.batch));
  if (cost) out << predicted_text(model, *cost);
  return out.str();
}

}  // namespace rannc
