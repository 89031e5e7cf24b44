#include "compiler/onnx_shape_arithmetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "ir/graph.h"

namespace rannc {
namespace {

using onnx::TensorProto;

// A small tensor of known values: a shape, an index, a size.
struct Known {
  std::vector<std::int64_t> dims;
  std::vector<double> values;
  bool floating = false;
};

constexpr std::size_t kMaxElements = 64;
// Values are held as doubles; beyond 2^53 they stop being exact, so nothing that large folds,
// except the "to the end" bounds exports give Slice, +-(2^63 - 1) (and -2^63), which become
// +-2^63 as doubles: they may be moved around (Unsqueeze, Concat) but take part in no arithmetic,
// and fold back to +-(2^63 - 1).
constexpr double kMaxExact = 9007199254740992.0;
constexpr double kSliceBound = 9223372036854775808.0;  // 2^63

// `count` values of type Raw from raw_data, or else from the typed repeated field; empty when
// neither holds exactly `count`.
template <typename Raw, typename Field>
std::vector<std::int64_t> read_values(const TensorProto& tensor, std::size_t count, const Field& typed) {
  if (!tensor.has_raw_data()) {
    if (static_cast<std::size_t>(typed.size()) != count) return {};
    return {typed.begin(), typed.end()};
  }
  if (tensor.raw_data().size() != count * sizeof(Raw)) return {};
  std::vector<std::int64_t> values(count);
  for (std::size_t i = 0; i < count; ++i) {
    Raw v;
    std::memcpy(&v, tensor.raw_data().data() + i * sizeof(Raw), sizeof(Raw));
    values[i] = v;
  }
  return values;
}

std::optional<Known> from_tensor(const TensorProto& tensor) {
  auto values = small_int_values(tensor, kMaxElements);
  if (!values) return std::nullopt;
  Known known{{tensor.dims().begin(), tensor.dims().end()}, {}, false};
  for (auto v : *values) known.values.push_back(static_cast<double>(v));
  return known;
}

bool exact(const Known& known) {
  return std::all_of(known.values.begin(), known.values.end(),
                     [](double v) { return std::fabs(v) <= kMaxExact || std::fabs(v) == kSliceBound; });
}

bool small(const Known& known) {
  return std::all_of(known.values.begin(), known.values.end(), [](double v) { return std::fabs(v) <= kMaxExact; });
}

std::optional<std::int64_t> int_attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name && attr.type() == onnx::AttributeProto::INT) return attr.i();
  }
  return std::nullopt;
}

std::vector<std::int64_t> ints_attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& attr : node.attribute()) {
    if (attr.name() == name) return {attr.ints().begin(), attr.ints().end()};
  }
  return {};
}

std::optional<Known> shape_of(const OnnxTypeMap& types, const std::string& name, const onnx::NodeProto& node) {
  auto it = types.find(name);
  if (it == types.end() || !it->second.tensor_type().has_shape()) return std::nullopt;
  std::vector<double> dims;
  for (const auto& dim : it->second.tensor_type().shape().dim()) {
    if (!dim.has_dim_value()) return std::nullopt;
    dims.push_back(static_cast<double>(dim.dim_value()));
  }
  auto rank = static_cast<std::int64_t>(dims.size());
  auto clamp = [&](std::int64_t i) { return std::max<std::int64_t>(0, std::min(rank, i < 0 ? i + rank : i)); };
  auto start = clamp(int_attribute(node, "start").value_or(0));
  auto end = clamp(int_attribute(node, "end").value_or(rank));
  std::vector<double> values(dims.begin() + start, dims.begin() + std::max(start, end));
  return Known{{static_cast<std::int64_t>(values.size())}, values, false};
}

// Elementwise arithmetic as shape code uses it: equal dims, or one operand with a single element
// (the result then has the dims of the operand of higher rank).
std::optional<Known> arithmetic(const std::string& op, const Known& a, const Known& b) {
  if (a.values.empty() || b.values.empty() || !small(a) || !small(b)) return std::nullopt;
  bool a_single = a.values.size() == 1, b_single = b.values.size() == 1;
  if (a.dims != b.dims && !a_single && !b_single) return std::nullopt;
  Known out = (!a_single || (b_single && a.dims.size() >= b.dims.size())) ? a : b;
  out.floating = a.floating || b.floating;
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    double x = a.values[a_single ? 0 : i], y = b.values[b_single ? 0 : i];
    if (op == "Add") out.values[i] = x + y;
    else if (op == "Sub") out.values[i] = x - y;
    else if (op == "Mul") out.values[i] = x * y;
    else if (y == 0) return std::nullopt;
    else out.values[i] = out.floating ? x / y : std::trunc(x / y);  // ONNX integer Div truncates
  }
  return out;
}

std::optional<Known> gather(const Known& data, const Known& indices) {
  if (data.dims.size() != 1) return std::nullopt;
  Known out{indices.dims, {}, data.floating};
  for (double index : indices.values) {
    if (std::fabs(index) > kMaxExact) return std::nullopt;
    auto i = static_cast<std::int64_t>(index);
    if (i < 0) i += static_cast<std::int64_t>(data.values.size());
    if (i < 0 || i >= static_cast<std::int64_t>(data.values.size())) return std::nullopt;
    out.values.push_back(data.values[static_cast<std::size_t>(i)]);
  }
  return out;
}

std::optional<Known> slice(const Known& data, const std::vector<const Known*>& args) {
  if (data.dims.size() != 1 || args.size() < 2 || !args[0] || !args[1]) return std::nullopt;
  if (args[0]->values.empty() || args[1]->values.empty()) return std::nullopt;
  if (args.size() > 3 && args[3] && args[3]->values.empty()) return std::nullopt;
  auto n = static_cast<std::int64_t>(data.values.size());
  auto bound = [&](double v) {
    auto i = static_cast<std::int64_t>(std::max(-1e18, std::min(1e18, v)));
    return std::max<std::int64_t>(0, std::min(n, i < 0 ? i + n : i));
  };
  double step_value = args.size() > 3 && args[3] ? args[3]->values.at(0) : 1;
  if (step_value < 1 || step_value > kMaxExact) return std::nullopt;
  auto step = static_cast<std::int64_t>(step_value);
  Known out{{0}, {}, data.floating};
  for (auto i = bound(args[0]->values.at(0)); i < bound(args[1]->values.at(0)); i += step) {
    out.values.push_back(data.values[static_cast<std::size_t>(i)]);
  }
  out.dims[0] = static_cast<std::int64_t>(out.values.size());
  return out;
}

class Evaluator {
 public:
  explicit Evaluator(const OnnxTypeMap& types) : types_(types) {}

  void remember(const std::string& name, Known known) { known_[name] = std::move(known); }
  const Known* find(const std::string& name) const {
    auto it = known_.find(name);
    return it == known_.end() ? nullptr : &it->second;
  }

  std::optional<Known> evaluate(const onnx::NodeProto& node) const {
    const std::string& op = node.op_type();
    if (op == "Shape") return shape_of(types_, node.input(0), node);
    // An omitted optional input (empty name) is absent; a named one must be known.
    std::vector<const Known*> in;
    for (const auto& name : node.input()) {
      if (name.empty()) {
        in.push_back(nullptr);
      } else if (const Known* known = find(name)) {
        in.push_back(known);
      } else {
        return std::nullopt;
      }
    }
    if (in.empty() || !in[0]) return std::nullopt;
    if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Gather") && (in.size() < 2 || !in[1])) {
      return std::nullopt;
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") return arithmetic(op, *in[0], *in[1]);
    if (op == "Gather" && int_attribute(node, "axis").value_or(0) == 0) return gather(*in[0], *in[1]);
    if (op == "Concat") return concat(in);
    if (op == "Slice") return slice(*in[0], {in.begin() + 1, in.end()});
    if (op == "Cast") return cast(node, *in[0]);
    if (op == "Unsqueeze" || op == "Squeeze") return reshaped(node, in);
    if (op == "ConstantOfShape") return constant_of_shape(node, *in[0]);
    if (op == "Identity") return *in[0];
    return std::nullopt;
  }

 private:
  static std::optional<Known> concat(const std::vector<const Known*>& in) {
    Known out{{0}, {}, false};
    for (const auto* part : in) {
      if (!part || part->dims.size() != 1) return std::nullopt;  // an omitted input (empty name)
      out.values.insert(out.values.end(), part->values.begin(), part->values.end());
      out.floating = out.floating || part->floating;
    }
    out.dims[0] = static_cast<std::int64_t>(out.values.size());
    return out;
  }

  static std::optional<Known> cast(const onnx::NodeProto& node, const Known& in) {
    auto to = int_attribute(node, "to").value_or(0);
    Known out = in;
    out.floating = to == TensorProto::FLOAT || to == TensorProto::DOUBLE || to == TensorProto::FLOAT16;
    if (!out.floating && to != TensorProto::INT64 && to != TensorProto::INT32) return std::nullopt;
    if (!out.floating) {
      for (auto& v : out.values) v = std::trunc(v);
    }
    return out;
  }

  // ConstantOfShape of a known small shape (exports build Expand targets of ones with it): the
  // fill value is an int attribute tensor, or float 0 by default.
  static std::optional<Known> constant_of_shape(const onnx::NodeProto& node, const Known& shape) {
    if (shape.dims.size() != 1) return std::nullopt;
    Known out{{}, {}, false};
    double count = 1;
    for (double d : shape.values) {
      if (d < 0 || d > static_cast<double>(kMaxElements)) return std::nullopt;
      count *= d;
      out.dims.push_back(static_cast<std::int64_t>(d));
    }
    if (count > static_cast<double>(kMaxElements)) return std::nullopt;
    double fill = 0;
    out.floating = true;
    for (const auto& attr : node.attribute()) {
      if (attr.name() != "value") continue;
      auto values = small_int_values(attr.t(), 1);
      if (!values || values->size() != 1) return std::nullopt;
      fill = static_cast<double>(values->front());
      out.floating = false;
    }
    out.values.assign(static_cast<std::size_t>(count), fill);
    return out;
  }

  // Unsqueeze and Squeeze only change dims; axes come from an attribute (opset < 13) or input 1.
  static std::optional<Known> reshaped(const onnx::NodeProto& node, const std::vector<const Known*>& in) {
    std::vector<std::int64_t> axes = ints_attribute(node, "axes");
    if (in.size() > 1 && in[1]) {
      if (!small(*in[1])) return std::nullopt;
      for (double a : in[1]->values) axes.push_back(static_cast<std::int64_t>(a));
    }
    Known out = *in[0];
    if (node.op_type() == "Unsqueeze") {
      auto rank = static_cast<std::int64_t>(out.dims.size() + axes.size());
      for (auto& a : axes) {
        a = a < 0 ? a + rank : a;
        if (a < 0 || a >= rank) return std::nullopt;
      }
      std::sort(axes.begin(), axes.end());
      for (auto a : axes) {
        if (a > static_cast<std::int64_t>(out.dims.size())) return std::nullopt;
        out.dims.insert(out.dims.begin() + a, 1);
      }
      return out;
    }
    std::vector<std::int64_t> kept;
    for (std::size_t i = 0; i < out.dims.size(); ++i) {
      bool squeezed = axes.empty() ? out.dims[i] == 1
                                   : std::count(axes.begin(), axes.end(), static_cast<std::int64_t>(i)) ||
                                         std::count(axes.begin(), axes.end(), static_cast<std::int64_t>(i) - static_cast<std::int64_t>(out.dims.size()));
      if (!squeezed) kept.push_back(out.dims[i]);
    }
    out.dims = kept;
    return out;
  }

  const OnnxTypeMap& types_;
  std::map<std::string, Known> known_;
};

std::optional<Known> constant_value(const onnx::NodeProto& node) {
  if (node.attribute_size() != 1 || node.output_size() != 1) return std::nullopt;
  const auto& attr = node.attribute(0);
  if (attr.name() == "value" && attr.has_t()) return from_tensor(attr.t());
  if (attr.name() == "value_int") return Known{{}, {static_cast<double>(attr.i())}, false};
  if (attr.name() == "value_ints" && static_cast<std::size_t>(attr.ints_size()) <= kMaxElements) {
    Known known{{attr.ints_size()}, {}, false};
    for (auto v : attr.ints()) known.values.push_back(static_cast<double>(v));
    return known;
  }
  return std::nullopt;
}

// The folded value keeps the element type inference gave the original output.
onnx::NodeProto constant_node(const std::string& output, const Known& known, int elem_type) {
  onnx::NodeProto node;
  node.set_op_type("Constant");
  node.add_output(output);
  auto* attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  auto* tensor = attr->mutable_t();
  for (auto dim : known.dims) tensor->add_dims(dim);
  tensor->set_data_type(elem_type);
  for (double v : known.values) {
    switch (elem_type) {
      case TensorProto::INT64:
        tensor->add_int64_data(std::fabs(v) >= kSliceBound ? (v > 0 ? INT64_MAX : -INT64_MAX) : static_cast<std::int64_t>(v));
        break;
      case TensorProto::INT32:
        tensor->add_int32_data(static_cast<std::int32_t>(std::max(-2147483648.0, std::min(2147483647.0, v))));
        break;
      case TensorProto::DOUBLE: tensor->add_double_data(v); break;
      default: tensor->add_float_data(static_cast<float>(v)); break;
    }
  }
  return node;
}

}  // namespace

std::optional<std::vector<std::int64_t>> small_int_values(const onnx::TensorProto& tensor, std::size_t max_elements) {
  if (tensor.data_location() == TensorProto::EXTERNAL) return std::nullopt;
  auto count = ir::checked_numel({tensor.dims().begin(), tensor.dims().end()});
  if (!count || static_cast<std::size_t>(*count) > max_elements) return std::nullopt;
  auto n = static_cast<std::size_t>(*count);
  std::vector<std::int64_t> values;
  if (tensor.data_type() == TensorProto::INT64) {
    values = read_values<std::int64_t>(tensor, n, tensor.int64_data());
  } else if (tensor.data_type() == TensorProto::INT32) {
    values = read_values<std::int32_t>(tensor, n, tensor.int32_data());
  } else {
    return std::nullopt;
  }
  if (values.size() != n) return std::nullopt;
  return values;
}

bool fold_shape_arithmetic(onnx::GraphProto& graph, const OnnxTypeMap& types) {
  Evaluator evaluator(types);
  for (const auto& init : graph.initializer()) {
    if (auto known = from_tensor(init)) evaluator.remember(init.name(), *known);
  }
  bool folded = false;
  for (auto& node : *graph.mutable_node()) {
    if (node.op_type() == "Constant") {
      if (auto known = constant_value(node)) evaluator.remember(node.output(0), *known);
      continue;
    }
    if (node.output_size() != 1) continue;
    auto known = evaluator.evaluate(node);
    if (!known || known->values.size() > kMaxElements || !exact(*known)) continue;
    auto type = types.find(node.output(0));
    int elem_type = type == types.end() ? 0 : type->second.tensor_type().elem_type();
    if (elem_type != TensorProto::INT64 && elem_type != TensorProto::INT32 && elem_type != TensorProto::FLOAT &&
        elem_type != TensorProto::DOUBLE) {
      continue;  // leave values of other or unknown types to inference
    }
    evaluator.remember(node.output(0), *known);
    node = constant_node(node.output(0), *known, elem_type);
    folded = true;
  }
  return folded;
}

}  // namespace rannc
