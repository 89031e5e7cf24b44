#include "frontends/onnx/onnx_shape_arithmetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>

#include "frontends/onnx/onnx_opsets.h"
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

// Float values of a small float or double tensor stored inline (scales, constants of shape arithmetic).
std::optional<std::vector<double>> small_float_values(const TensorProto& tensor, std::size_t max_elements) {
  if (tensor.data_location() == TensorProto::EXTERNAL) return std::nullopt;
  auto count = ir::checked_numel({tensor.dims().begin(), tensor.dims().end()});
  if (!count || static_cast<std::size_t>(*count) > max_elements) return std::nullopt;
  auto n = static_cast<std::size_t>(*count);
  auto read = [&](auto sample, const auto& typed) -> std::optional<std::vector<double>> {
    using T = decltype(sample);
    std::vector<double> values;
    if (!tensor.has_raw_data()) {
      if (static_cast<std::size_t>(typed.size()) != n) return std::nullopt;
      values.assign(typed.begin(), typed.end());
    } else {
      if (tensor.raw_data().size() != n * sizeof(T)) return std::nullopt;
      for (std::size_t i = 0; i < n; ++i) {
        T v;
        std::memcpy(&v, tensor.raw_data().data() + i * sizeof(T), sizeof(T));
        values.push_back(static_cast<double>(v));
      }
    }
    return values;
  };
  if (tensor.data_type() == TensorProto::FLOAT) return read(float{}, tensor.float_data());
  if (tensor.data_type() == TensorProto::DOUBLE) return read(double{}, tensor.double_data());
  return std::nullopt;
}

// A small int or float tensor's values: floats take part too (PyTorch computes Resize scales
// with a Concat of float constants).
std::optional<Known> from_tensor(const TensorProto& tensor) {
  Known known{{tensor.dims().begin(), tensor.dims().end()}, {}, false};
  if (auto values = small_int_values(tensor, kMaxElements)) {
    for (auto v : *values) known.values.push_back(static_cast<double>(v));
    return known;
  }
  auto floats = small_float_values(tensor, kMaxElements);
  if (!floats) return std::nullopt;
  known.values = *floats;
  known.floating = true;
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
    else if (op == "Mod") out.values[i] = x - std::floor(x / y) * y;  // the sign of the divisor, as Python's
    else if (op == "FMod") out.values[i] = std::fmod(x, y);
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

// ONNX's bounds of one sliced axis of size n: negative ones count from the end, then they are
// clamped to [0, n] walking up and to [-1, n - 1] walking down.
std::vector<std::int64_t> slice_indices(std::int64_t n, double start, double end, std::int64_t step) {
  auto index = [&](double v, std::int64_t low, std::int64_t high) {
    double i = v < 0 ? v + static_cast<double>(n) : v;
    return static_cast<std::int64_t>(std::max<double>(static_cast<double>(low), std::min<double>(static_cast<double>(high), i)));
  };
  std::vector<std::int64_t> picked;
  if (step > 0) {
    for (auto i = index(start, 0, n), e = index(end, 0, n); i < e; i += step) picked.push_back(i);
  } else {
    for (auto i = index(start, 0, n - 1), e = index(end, -1, n - 1); i > e; i += step) picked.push_back(i);
  }
  return picked;
}

// The elements of `data` at the given indices along each dim, in row-major order.
Known gather_grid(const Known& data, const std::vector<std::vector<std::int64_t>>& picks) {
  Known out{{}, {}, data.floating};
  for (const auto& p : picks) out.dims.push_back(static_cast<std::int64_t>(p.size()));
  std::vector<std::int64_t> strides(data.dims.size(), 1);
  for (auto d = static_cast<std::int64_t>(data.dims.size()) - 2; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = strides[static_cast<std::size_t>(d) + 1] * data.dims[static_cast<std::size_t>(d) + 1];
  }
  std::vector<std::size_t> at(picks.size(), 0);
  bool empty = std::any_of(picks.begin(), picks.end(), [](const auto& p) { return p.empty(); });
  while (!empty) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < picks.size(); ++d) offset += picks[d][at[d]] * strides[d];
    out.values.push_back(data.values[static_cast<std::size_t>(offset)]);
    std::size_t d = picks.size();
    while (d > 0 && ++at[d - 1] == picks[d - 1].size()) at[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

// Slice of any rank, steps of either sign (PyTorch's F.pad export reverses its pads with step -1).
std::optional<Known> slice(const Known& data, const std::vector<const Known*>& args) {
  if (args.size() < 2 || !args[0] || !args[1]) return std::nullopt;
  std::size_t count = args[0]->values.size();
  const Known* axes = args.size() > 2 ? args[2] : nullptr;
  const Known* steps = args.size() > 3 ? args[3] : nullptr;
  if (count == 0 || args[1]->values.size() != count || (axes && (axes->values.size() != count || !small(*axes))) ||
      (steps && (steps->values.size() != count || !small(*steps)))) {
    return std::nullopt;
  }
  auto rank = static_cast<std::int64_t>(data.dims.size());
  std::vector<std::vector<std::int64_t>> picks;
  for (auto n : data.dims) {
    if (n > static_cast<std::int64_t>(kMaxElements)) return std::nullopt;  // [0, 2^40] holds no element, yet
    picks.emplace_back();
    for (std::int64_t i = 0; i < n; ++i) picks.back().push_back(i);
  }
  for (std::size_t k = 0; k < count; ++k) {
    auto axis = axes ? static_cast<std::int64_t>(axes->values[k]) : static_cast<std::int64_t>(k);
    if (axis < 0) axis += rank;
    auto step = steps ? static_cast<std::int64_t>(steps->values[k]) : 1;
    if (axis < 0 || axis >= rank || step == 0) return std::nullopt;
    auto& pick = picks[static_cast<std::size_t>(axis)];
    pick = slice_indices(static_cast<std::int64_t>(pick.size()), args[0]->values[k], args[1]->values[k], step);
  }
  return gather_grid(data, picks);
}

// Reshape: 0 copies the input's dim (unless allowzero), one -1 takes what is left.
std::optional<Known> reshape(const Known& data, const Known& shape, bool allowzero) {
  if (shape.dims.size() != 1 || !small(shape)) return std::nullopt;
  std::vector<std::int64_t> dims;
  std::optional<std::size_t> inferred;
  double product = 1;  // of at most 64 values below 2^53: no overflow
  for (std::size_t i = 0; i < shape.values.size(); ++i) {
    auto v = static_cast<std::int64_t>(shape.values[i]);
    if (v == 0 && !allowzero) {
      if (i >= data.dims.size()) return std::nullopt;
      v = data.dims[i];
    }
    if (v == -1 && !inferred) {
      inferred = i;
      v = 1;
    } else if (v < 0) {
      return std::nullopt;
    }
    dims.push_back(v);
    product *= static_cast<double>(v);
  }
  auto total = static_cast<double>(data.values.size());
  if (inferred) {
    if (product == 0 || std::fmod(total, product) != 0) return std::nullopt;
    dims[*inferred] = static_cast<std::int64_t>(total / product);
    product = total;
  }
  if (product != total) return std::nullopt;
  return Known{dims, data.values, data.floating};
}

std::optional<Known> transpose(const Known& data, std::vector<std::int64_t> perm) {
  auto rank = data.dims.size();
  auto large = [](std::int64_t d) { return d > static_cast<std::int64_t>(kMaxElements); };
  if (std::any_of(data.dims.begin(), data.dims.end(), large)) return std::nullopt;  // dims of no element
  if (perm.empty()) {
    for (auto d = static_cast<std::int64_t>(rank) - 1; d >= 0; --d) perm.push_back(d);
  }
  if (perm.size() != rank) return std::nullopt;
  std::vector<std::int64_t> strides(rank, 1), out_dims;
  for (auto d = static_cast<std::int64_t>(rank) - 2; d >= 0; --d) {
    strides[static_cast<std::size_t>(d)] = strides[static_cast<std::size_t>(d) + 1] * data.dims[static_cast<std::size_t>(d) + 1];
  }
  for (auto p : perm) {
    if (p < 0 || p >= static_cast<std::int64_t>(rank)) return std::nullopt;
    out_dims.push_back(data.dims[static_cast<std::size_t>(p)]);
  }
  Known out{out_dims, {}, data.floating};
  std::vector<std::int64_t> at(rank, 0);
  for (std::size_t n = 0; n < data.values.size(); ++n) {
    std::int64_t offset = 0;
    for (std::size_t d = 0; d < rank; ++d) offset += at[d] * strides[static_cast<std::size_t>(perm[d])];
    out.values.push_back(data.values[static_cast<std::size_t>(offset)]);
    for (auto d = static_cast<std::int64_t>(rank) - 1; d >= 0; --d) {
      auto u = static_cast<std::size_t>(d);
      if (++at[u] < out_dims[u]) break;
      at[u] = 0;
    }
  }
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
    bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Mod";
    if ((binary || op == "Gather" || op == "Reshape") && (in.size() < 2 || !in[1])) return std::nullopt;
    if (op == "Mod") return arithmetic(int_attribute(node, "fmod").value_or(0) ? "FMod" : "Mod", *in[0], *in[1]);
    if (binary) return arithmetic(op, *in[0], *in[1]);
    if (op == "Reshape") return reshape(*in[0], *in[1], int_attribute(node, "allowzero").value_or(0) != 0);
    if (op == "Transpose") return transpose(*in[0], ints_attribute(node, "perm"));
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

// ---------------------------------------------------------------------------------------------
// Shape inference of opsets 18-23 with a library that knows opset 17
// ---------------------------------------------------------------------------------------------

namespace {

using onnx_opsets::ShapeRule;
constexpr std::int64_t kUnknownDim = std::numeric_limits<std::int64_t>::min();
using Dims = std::vector<std::int64_t>;  // kUnknownDim: a dim of unknown size
bool known(std::int64_t dim) { return dim != kUnknownDim; }
using OutputTypes = std::vector<std::optional<onnx::TypeProto>>;

onnx::TypeProto tensor_type(int elem_type, const Dims& dims) {
  onnx::TypeProto type;
  auto* tensor = type.mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  auto* shape = tensor->mutable_shape();
  for (auto d : dims) {
    auto* dim = shape->add_dim();
    if (known(d)) dim->set_dim_value(d);
  }
  return type;
}

using Constants = std::map<std::string, const TensorProto*>;

// What a rule sees of one node: its inputs' types (of the previous round) and constant values.
class RuleInputs {
 public:
  RuleInputs(const onnx::NodeProto& node, const OnnxTypeMap& types, const Constants& constants)
      : node_(node), types_(types), constants_(constants) {}

  const onnx::NodeProto& node() const { return node_; }
  bool has(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }

  const onnx::TypeProto_Tensor* tensor(int i) const {
    if (!has(i)) return nullptr;
    auto it = types_.find(node_.input(i));
    return it == types_.end() || !it->second.has_tensor_type() ? nullptr : &it->second.tensor_type();
  }
  int elem_type(int i) const { return tensor(i) ? tensor(i)->elem_type() : 0; }
  std::optional<Dims> dims(int i) const {
    const auto* t = tensor(i);
    if (!t || !t->has_shape()) return std::nullopt;
    Dims dims;
    for (const auto& dim : t->shape().dim()) dims.push_back(dim.has_dim_value() ? dim.dim_value() : kUnknownDim);
    return dims;
  }

  std::optional<std::vector<std::int64_t>> ints(int i) const {
    const auto* t = constant(i);
    return t ? small_int_values(*t, kMaxElements) : std::nullopt;
  }
  std::optional<std::vector<double>> floats(int i) const {
    const auto* t = constant(i);
    return t ? small_float_values(*t, kMaxElements) : std::nullopt;
  }

 private:
  const TensorProto* constant(int i) const {
    if (!has(i)) return nullptr;
    auto it = constants_.find(node_.input(i));
    return it == constants_.end() ? nullptr : it->second;
  }

  const onnx::NodeProto& node_;
  const OnnxTypeMap& types_;
  const Constants& constants_;
};

std::int64_t normalized_axis(std::int64_t axis, std::size_t rank) {
  return axis < 0 ? axis + static_cast<std::int64_t>(rank) : axis;
}

bool valid_axis(std::int64_t axis, std::size_t rank) { return axis >= 0 && axis < static_cast<std::int64_t>(rank); }

// A computed dim (unknown for NaN). A negative or absurdly large one is kept, saturated to what an
// int64 holds, for the frontend to refuse with its size.
std::int64_t dim_of(double v) {
  constexpr double kLimit = 9.2e18;  // below 2^63
  if (std::isnan(v)) return kUnknownDim;
  if (std::fabs(v) >= kLimit) return v > 0 ? std::numeric_limits<std::int64_t>::max() : -std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(v);
}

// Reductions over axes computed at run time: the rank is known when the dims are kept.
OutputTypes reduce_types(const RuleInputs& in) {
  auto x = in.dims(0);
  if (!x || int_attribute(in.node(), "keepdims").value_or(1) == 0) return {std::nullopt};
  return {tensor_type(in.elem_type(0), Dims(x->size(), kUnknownDim))};
}

// Split into num_outputs parts (opset 18): ceil(n / parts) each, the last one smaller.
OutputTypes split_types(const RuleInputs& in) {
  auto x = in.dims(0);
  auto parts = static_cast<std::int64_t>(in.node().output_size());
  if (!x || parts < 1) return OutputTypes(static_cast<std::size_t>(std::max<std::int64_t>(parts, 0)));
  auto axis = normalized_axis(int_attribute(in.node(), "axis").value_or(0), x->size());
  if (!valid_axis(axis, x->size())) return OutputTypes(static_cast<std::size_t>(parts));
  auto n = static_cast<double>((*x)[static_cast<std::size_t>(axis)]);
  double chunk = std::ceil(n / static_cast<double>(parts));
  OutputTypes out;
  for (std::int64_t i = 0; i < parts; ++i) {
    Dims dims = *x;
    double part = std::max(0.0, std::min(chunk, n - static_cast<double>(i) * chunk));
    dims[static_cast<std::size_t>(axis)] = known((*x)[static_cast<std::size_t>(axis)]) ? dim_of(part) : kUnknownDim;
    out.push_back(tensor_type(in.elem_type(0), dims));
  }
  return out;
}

// Pad over the axes of input 3: begin and end pads of axis k are pads[k] and pads[k + count].
OutputTypes pad_types(const RuleInputs& in) {
  auto x = in.dims(0);
  if (!x) return {std::nullopt};
  auto pads = in.ints(1);
  auto axes = in.ints(3);
  Dims dims(x->size(), kUnknownDim);
  if (pads && axes && pads->size() == 2 * axes->size()) {
    dims = *x;
    for (std::size_t k = 0; k < axes->size(); ++k) {
      auto axis = normalized_axis((*axes)[k], x->size());
      if (!valid_axis(axis, x->size())) return {std::nullopt};
      auto& d = dims[static_cast<std::size_t>(axis)];
      double padded = static_cast<double>(d) + static_cast<double>((*pads)[k]) + static_cast<double>((*pads)[k + axes->size()]);
      if (known(d)) d = dim_of(padded);
    }
  }
  return {tensor_type(in.elem_type(0), dims)};
}

// Resize on its axes: out = floor(in * scale), or the sizes; keep_aspect_ratio_policy scales
// every axis by the least (not_larger) or largest (not_smaller) of sizes / in, rounding half up.
OutputTypes resize_types(const RuleInputs& in) {
  auto x = in.dims(0);
  if (!x) return {std::nullopt};
  std::vector<std::int64_t> axes = ints_attribute(in.node(), "axes");
  if (axes.empty()) {
    for (std::size_t d = 0; d < x->size(); ++d) axes.push_back(static_cast<std::int64_t>(d));
  }
  for (auto& a : axes) {
    a = normalized_axis(a, x->size());
    if (!valid_axis(a, x->size())) return {std::nullopt};
  }
  Dims dims = *x;
  auto sizes = in.ints(3);
  auto scales = in.floats(2);
  if (sizes && sizes->size() == axes.size()) {
    std::string policy = "stretch";
    for (const auto& attr : in.node().attribute()) {
      if (attr.name() == "keep_aspect_ratio_policy") policy = attr.s();
    }
    std::optional<double> scale;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      auto d = (*x)[static_cast<std::size_t>(axes[k])];
      if (!known(d) || d <= 0) return {tensor_type(in.elem_type(0), Dims(x->size(), kUnknownDim))};
      double s = static_cast<double>((*sizes)[k]) / static_cast<double>(d);
      if (!scale || (policy == "not_larger" ? s < *scale : s > *scale)) scale = s;
    }
    for (std::size_t k = 0; k < axes.size(); ++k) {
      auto& d = dims[static_cast<std::size_t>(axes[k])];
      d = policy == "stretch" ? (*sizes)[k] : dim_of(std::floor(*scale * static_cast<double>(d) + 0.5));
    }
  } else if (scales && scales->size() == axes.size()) {
    for (std::size_t k = 0; k < axes.size(); ++k) {
      auto& d = dims[static_cast<std::size_t>(axes[k])];
      if (known(d)) d = dim_of(std::floor(static_cast<double>(d) * (*scales)[k]));
    }
  } else {
    dims.assign(x->size(), kUnknownDim);
  }
  return {tensor_type(in.elem_type(0), dims)};
}

// Attention (opset 23): Q [B, Hq, S, E] and K, V [B, Hkv, L, E|Ev], or 3-D [B, S, H*E] with the
// head counts as attributes. Y has Q's layout with V's head size; present key and value are 4-D,
// the past's sequence followed by K's and V's; the QK product is [B, Hq, S, past + L].
OutputTypes attention_types(const RuleInputs& in) {
  auto q = in.dims(0), k = in.dims(1), v = in.dims(2);
  OutputTypes out(static_cast<std::size_t>(in.node().output_size()));
  if (!q || !k || !v || q->size() != k->size() || q->size() != v->size() || (q->size() != 3 && q->size() != 4)) return out;
  auto div = [&](std::int64_t a, std::int64_t b) { return known(a) && b > 0 ? a / b : kUnknownDim; };
  Dims k4 = *k, v4 = *v;
  std::int64_t q_heads = 0;
  if (q->size() == 3) {
    q_heads = int_attribute(in.node(), "q_num_heads").value_or(0);
    auto kv_heads = int_attribute(in.node(), "kv_num_heads").value_or(0);
    if (q_heads <= 0 || kv_heads <= 0) return out;
    k4 = {(*k)[0], kv_heads, (*k)[1], div((*k)[2], kv_heads)};
    v4 = {(*v)[0], kv_heads, (*v)[1], div((*v)[2], kv_heads)};
  } else {
    q_heads = (*q)[1];
  }
  auto add = [&](std::int64_t a, std::int64_t b) {
    return known(a) && known(b) ? dim_of(static_cast<double>(a) + static_cast<double>(b)) : kUnknownDim;
  };
  auto mul = [&](std::int64_t a, std::int64_t b) {
    return known(a) && known(b) ? dim_of(static_cast<double>(a) * static_cast<double>(b)) : kUnknownDim;
  };
  auto past_key = in.dims(4), past_value = in.dims(5);
  if (past_key && past_key->size() == 4) k4[2] = add(k4[2], (*past_key)[2]);
  if (past_value && past_value->size() == 4) v4[2] = add(v4[2], (*past_value)[2]);
  std::int64_t batch = (*q)[0], seq = (*q)[q->size() == 3 ? 1 : 2];
  Dims y = q->size() == 3 ? Dims{batch, seq, mul(q_heads, v4[3])} : Dims{batch, q_heads, seq, v4[3]};
  std::vector<Dims> dims = {y, k4, v4, {batch, q_heads, seq, k4[2]}};
  for (std::size_t i = 0; i < out.size() && i < dims.size(); ++i) out[i] = tensor_type(in.elem_type(i == 2 ? 2 : 0), dims[i]);
  return out;
}

// What library inference sees of one node: kept, replaced by another, or removed with its
// outputs typed here.
struct Lowering {
  enum Action { kKeep, kReplace, kRemove } action = kKeep;
  onnx::NodeProto replacement;
  OutputTypes outputs;
};

Lowering replaced(onnx::NodeProto node) { return {Lowering::kReplace, std::move(node), {}}; }
Lowering removed(OutputTypes outputs) { return {Lowering::kRemove, {}, std::move(outputs)}; }

onnx::NodeProto identity_of(const onnx::NodeProto& node) {
  onnx::NodeProto identity;
  identity.set_op_type("Identity");
  identity.set_name(node.name());
  identity.add_input(node.input(0));
  identity.add_output(node.output(0));
  return identity;
}

// A reduction of opset 18 (axes as input 1) in the opset-13 form: axes as an attribute, absent
// for all axes; noop_with_empty_axes and no axes give the input itself.
Lowering lower_reduce(const RuleInputs& in) {
  const auto& node = in.node();
  auto axes = in.has(1) ? in.ints(1) : std::vector<std::int64_t>{};
  if (!axes) return removed(reduce_types(in));
  if (axes->empty() && int_attribute(node, "noop_with_empty_axes").value_or(0) != 0) return replaced(identity_of(node));
  onnx::NodeProto lowered = node;
  while (lowered.input_size() > 1) lowered.mutable_input()->RemoveLast();
  lowered.clear_attribute();
  for (const auto& attr : node.attribute()) {
    if (attr.name() == "keepdims") *lowered.add_attribute() = attr;
  }
  if (!axes->empty()) {
    auto* attr = lowered.add_attribute();
    attr->set_name("axes");
    attr->set_type(onnx::AttributeProto::INTS);
    for (auto a : *axes) attr->add_ints(a);
  }
  return replaced(std::move(lowered));
}

Lowering lower_node(const onnx::NodeProto& node, ShapeRule rule, const RuleInputs& in) {
  bool has_axes_attribute = !ints_attribute(node, "axes").empty();
  switch (rule) {
    case ShapeRule::kLibrary: return {};
    case ShapeRule::kLikeInput: return replaced(identity_of(node));
    case ShapeRule::kReduce: return lower_reduce(in);
    case ShapeRule::kSplit: return in.has(1) ? Lowering{} : removed(split_types(in));
    case ShapeRule::kPad: return in.has(3) ? removed(pad_types(in)) : Lowering{};
    case ShapeRule::kResize: {
      bool stretch = true;
      for (const auto& attr : node.attribute()) {
        if (attr.name() == "keep_aspect_ratio_policy") stretch = attr.s() == "stretch";
      }
      return has_axes_attribute || !stretch ? removed(resize_types(in)) : Lowering{};
    }
    case ShapeRule::kAttention: return removed(attention_types(in));
  }
  return {};
}

bool default_domain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// Initializers and Constant nodes' tensors of every graph, by name.
Constants constants_of(const onnx::GraphProto& graph) {
  Constants constants;
  std::vector<const onnx::GraphProto*> pending = {&graph};
  while (!pending.empty()) {
    const auto* g = pending.back();
    pending.pop_back();
    for (const auto& init : g->initializer()) constants[init.name()] = &init;
    for (const auto& node : g->node()) {
      if (node.op_type() == "Constant" && node.output_size() == 1) {
        for (const auto& attr : node.attribute()) {
          if (attr.name() == "value" && attr.has_t()) constants[node.output(0)] = &attr.t();
        }
      }
      for (const auto& attr : node.attribute()) {
        if (attr.has_g()) pending.push_back(&attr.g());
        for (const auto& sub : attr.graphs()) pending.push_back(&sub);
      }
    }
  }
  return constants;
}

}  // namespace

LoweredModel lower_for_library(const onnx::ModelProto& model, const OnnxTypeMap& types) {
  LoweredModel out;
  out.model = model;
  int opset = 0;
  for (auto& import : *out.model.mutable_opset_import()) {
    if (!default_domain(import.domain())) continue;
    opset = static_cast<int>(import.version());
    import.set_version(std::min<std::int64_t>(import.version(), onnx_opsets::kLibraryOpset));
  }
  out.model.set_ir_version(std::min<std::int64_t>(out.model.ir_version(), onnx_opsets::kLibraryIrVersion));
  const Constants constants = constants_of(model.graph());
  // Graphs are rewritten whole, then their subgraphs: the stack holds subgraphs of nodes that
  // are already in place.
  std::vector<onnx::GraphProto*> pending = {out.model.mutable_graph()};
  while (!pending.empty()) {
    auto* graph = pending.back();
    pending.pop_back();
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (const auto& node : graph->node()) {
      const auto* form = default_domain(node.domain()) ? onnx_opsets::op_form(node.op_type(), opset) : nullptr;
      Lowering lowering = form ? lower_node(node, form->shape, RuleInputs(node, types, constants)) : Lowering{};
      if (lowering.action == Lowering::kKeep) *nodes.Add() = node;
      if (lowering.action == Lowering::kReplace) *nodes.Add() = std::move(lowering.replacement);
      if (lowering.action != Lowering::kRemove) continue;
      for (int i = 0; i < node.output_size(); ++i) {
        const auto& type = static_cast<std::size_t>(i) < lowering.outputs.size() ? lowering.outputs[static_cast<std::size_t>(i)]
                                                                                  : std::nullopt;
        if (node.output(i).empty()) continue;
        if (!type) {
          out.complete = false;
          continue;
        }
        // A graph output's own entry holds its type (library inference reads it last).
        auto output = std::find_if(graph->mutable_output()->begin(), graph->mutable_output()->end(),
                                   [&](const onnx::ValueInfoProto& o) { return o.name() == node.output(i); });
        auto* info = output != graph->mutable_output()->end() ? &*output : graph->add_value_info();
        info->set_name(node.output(i));
        *info->mutable_type() = *type;
        ++out.typed;
      }
    }
    graph->mutable_node()->Swap(&nodes);
    for (auto& node : *graph->mutable_node()) {
      for (auto& attr : *node.mutable_attribute()) {
        if (attr.has_g()) pending.push_back(attr.mutable_g());
        for (auto& sub : *attr.mutable_graphs()) pending.push_back(&sub);
      }
    }
  }
  return out;
}

}  // namespace rannc
