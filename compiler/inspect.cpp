#include "compiler/inspect.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "cost_model/op_work.h"
#include "ir/dump.h"

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
    auto work = cost::op_work(graph, op);
    t.flops_fwd += work.flops_fwd;
    if (work.op_class == cost::OpClass::kUnknown) t.uncosted_kinds.insert(op.kind);
  }
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

// "12,345,678"
std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string scaled(double amount, const char* const units[], int count, double step) {
  int unit = 0;
  while (amount >= step && unit + 1 < count) {
    amount /= step;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", amount, units[unit]);
  return text;
}

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, units, 6, 1024);
}

std::string human_flops(double flops) {
  static const char* const units[] = {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  return scaled(flops, units, 6, 1000);
}

void print_values(std::ostringstream& out, const char* label, const ir::Graph& graph, const std::vector<ir::ValueId>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto& v = graph.value(ids[i]);
    std::string type = v.is_tensor() ? ir::type_to_string(v.type) : std::string(ir::value_kind_name(v.kind));
    out << (i == 0 ? label : "") << std::string(i == 0 ? 11 - std::string(label).size() : 11, ' ') << v.name << "  "
        << type << "\n";
  }
}

}  // namespace

nlohmann::json inspect_json(const Model& model) {
  const auto& graph = model.graph;
  Totals t = totals(graph);
  return {{"model", model.path},
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
          {"uncosted_ops", t.uncosted_kinds}};
}

std::string inspect_text(const Model& model) {
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
  return out.str();
}

}  // namespace rannc
