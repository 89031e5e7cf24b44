#include "ir/dump.h"

#include <sstream>

namespace rannc::ir {
namespace {

template <typename T>
std::string join(const std::vector<T>& items) {
  std::ostringstream out;
  for (std::size_t i = 0; i < items.size(); ++i) out << (i ? "," : "") << items[i];
  return out.str();
}

std::string value_type_to_string(const Value& v) {
  if (v.is_tensor()) return type_to_string(v.type);
  std::string text(value_kind_name(v.kind));
  if (v.literal.index() != 0) text += "=" + literal_to_string(v.literal);
  return text;
}

nlohmann::json literal_to_json(const Literal& literal) {
  return std::visit(
      [](const auto& x) -> nlohmann::json {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::monostate>) {
          return nullptr;
        } else {
          return x;
        }
      },
      literal);
}

}  // namespace

std::string type_to_string(const TensorType& type) {
  std::string text(dtype_name(type.dtype));
  if (!type.rank_known) return text + "[?]";
  text += "[";
  for (std::size_t i = 0; i < type.shape.size(); ++i) {
    if (i) text += ",";
    if (static_cast<int>(i) == type.batch_dim) text += "*";
    text += type.shape[i] < 0 ? "?" : std::to_string(type.shape[i]);
  }
  return text + "]";
}

std::string literal_to_string(const Literal& literal) {
  std::ostringstream out;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out << "none";
        } else if constexpr (std::is_same_v<T, bool>) {
          out << (x ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::string>) {
          out << '"' << x << '"';
        } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>>) {
          out << "[" << join(x) << "]";
        } else {
          out << x;
        }
      },
      literal);
  return out.str();
}

std::string graph_to_text(const Graph& graph) {
  std::ostringstream out;
  for (const auto& v : graph.values()) {
    if (v.role == ValueRole::kIntermediate) continue;
    out << value_role_name(v.role) << " %" << v.name << " : " << value_type_to_string(v) << "\n";
  }
  for (auto op_id : graph.topological_order()) {
    const Op& op = graph.op(op_id);
    std::vector<std::string> outs, ins, types;
    for (auto id : op.outputs) {
      outs.push_back("%" + graph.value(id).name);
      types.push_back(value_type_to_string(graph.value(id)));
    }
    for (auto id : op.inputs) ins.push_back("%" + graph.value(id).name);
    out << join(outs) << " = " << op.kind << "(" << join(ins) << ")";
    for (const auto& [key, attr] : op.attrs) out << " " << key << "=" << literal_to_string(attr);
    std::vector<std::string> written;
    for (auto id : op.writes) written.push_back("%" + graph.value(id).name);
    if (!written.empty()) out << " writes " << join(written);
    out << " : " << join(types);
    if (const auto& module = graph.module_path(op_id); !module.empty()) out << "  # " << module;
    out << "\n";
  }
  std::vector<std::string> outputs;
  for (auto id : graph.model_outputs()) outputs.push_back("%" + graph.value(id).name);
  out << "return " << join(outputs) << "\n";
  return out.str();
}

nlohmann::json graph_to_json(const Graph& graph) {
  nlohmann::json values = nlohmann::json::array();
  for (const auto& v : graph.values()) {
    nlohmann::json j{{"id", v.id},
                     {"name", v.name},
                     {"kind", value_kind_name(v.kind)},
                     {"role", value_role_name(v.role)},
                     {"batch_dependent", v.batch_dependent},
                     {"producer", v.producer},
                     {"consumers", v.consumers}};
    if (v.is_tensor()) {
      j["dtype"] = dtype_name(v.type.dtype);
      j["shape"] = v.type.rank_known ? nlohmann::json(v.type.shape) : nlohmann::json(nullptr);
      j["batch_dim"] = v.type.batch_dim;
    } else {
      j["literal"] = literal_to_json(v.literal);
    }
    if (v.model_output) j["model_output"] = true;
    values.push_back(std::move(j));
  }
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : graph.ops()) {
    nlohmann::json attrs = nlohmann::json::object();
    for (const auto& [key, attr] : op.attrs) attrs[key] = literal_to_json(attr);
    ops.push_back({{"id", op.id}, {"kind", op.kind}, {"inputs", op.inputs}, {"outputs", op.outputs}, {"attrs", attrs}});
    if (!op.writes.empty()) ops.back()["writes"] = op.writes;
    if (const auto& module = graph.module_path(op.id); !module.empty()) ops.back()["module"] = module;
  }
  return {{"values", values}, {"ops", ops}, {"outputs", graph.model_outputs()}};
}

}  // namespace rannc::ir
