#include "cost_model/op_signature.h"

#include <iomanip>
#include <sstream>

namespace rannc::cost {
namespace {

template <typename T>
void write_list(std::ostringstream& out, const std::vector<T>& items) {
  out << '[';
  for (std::size_t i = 0; i < items.size(); ++i) out << (i ? "," : "") << items[i];
  out << ']';
}

void write_literal(std::ostringstream& out, const ir::Literal& literal) {
  if (const auto* v = std::get_if<std::int64_t>(&literal)) out << *v;
  else if (const auto* d = std::get_if<double>(&literal)) out << *d;
  else if (const auto* b = std::get_if<bool>(&literal)) out << (*b ? "true" : "false");
  else if (const auto* s = std::get_if<std::string>(&literal)) out << std::quoted(*s, '\'');
  else if (const auto* ints = std::get_if<std::vector<std::int64_t>>(&literal)) write_list(out, *ints);
  else if (const auto* doubles = std::get_if<std::vector<double>>(&literal)) write_list(out, *doubles);
  else out << '?';
}

void write_value(std::ostringstream& out, const ir::Value& value, bool requires_grad) {
  if (value.is_tensor()) {
    out << ir::dtype_name(value.type.dtype);
    write_list(out, value.type.shape);
    if (requires_grad) out << '*';
  } else if (value.kind == ir::ValueKind::kNone) {
    out << "None";
  } else {
    write_literal(out, value.literal);
  }
}

}  // namespace

std::string op_signature(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad) {
  std::ostringstream out;
  out << std::setprecision(17) << op.kind << '(';
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (i) out << ',';
    write_value(out, graph.value(op.inputs[i]), requires_grad[static_cast<std::size_t>(op.inputs[i])]);
  }
  out << ')';
  if (!op.attrs.empty()) {
    out << '{';
    bool first = true;
    for (const auto& [name, literal] : op.attrs) {
      out << (first ? "" : ";") << name << '=';
      write_literal(out, literal);
      first = false;
    }
    out << '}';
  }
  return out.str();
}

std::string loss_signature(const ir::Value& input) {
  std::ostringstream out;
  out << "rannc::training_loss(";
  write_value(out, input, true);
  out << ')';
  return out.str();
}

}  // namespace rannc::cost
