#include "compiler/onnx_shape_arithmetic.h"

#include <cmath>
#include <map>
#include <optional>

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

std::optional<Known> from_tensor(const TensorProto& tensor) {
  Known known{{tensor.dims().begin(), tensor.dims().end()}, {}, false};
  auto read = [&](auto* data, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) known.values.push_back(static_cast<double>(data[i]));
  };
  const std::string& raw = tensor.raw_data();
  switch (tensor.data_type()) {
    case TensorProto::INT64:
      if (tensor.has_raw_data()) read(reinterpret_cast<const std::int64_t*>(raw.data()), raw.size() / 8);
      else read(tensor.int64_data().data(), static_cast<std::size_t>(tensor.int64_data_size()));
      break;
    case TensorProto::INT32:
      if (tensor.has_raw_data()) read(reinterpret_cast<const std::int32_t*>(raw.data()), raw.size() / 4);
      else read(tensor.int32_data().data(), static_cast<std::size_t>(tensor.int32_data_size()));
      break;
    default: return std::nullopt;
  }
  std::size_t expected = 1;
  for (auto dim : known.dims) expected *= static_cast<std::size_t>(dim);
  if (known.values.size() != expected || expected > kMaxElements) return std::nullopt;
  return known;
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

// Elementwise arithmetic with the broadcasting that shape code uses: equal sizes or a scalar.
std::optional<Known> arithmetic(const std::string& op, const Known& a, const Known& b) {
  if (a.values.size() != b.values.size() && a.values.size() != 1 && b.values.size() != 1) return std::nullopt;
  Known out = a.values.size() >= b.values.size() ? a : b;
  out.floating = a.floating || b.floating;
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    double x = a.values[a.values.size() == 1 ? 0 : i], y = b.values[b.values.size() == 1 ? 0 : i];
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
    auto i = static_cast<std::int64_t>(index);
    if (i < 0) i += static_cast<std::int64_t>(data.values.size());
    if (i < 0 || i >= static_cast<std::int64_t>(data.values.size())) return std::nullopt;
    out.values.push_back(data.values[static_cast<std::size_t>(i)]);
  }
  return out;
}

std::optional<Known> slice(const Known& data, const std::vector<const Known*>& args) {
  if (data.dims.size() != 1 || args.size() < 2 || !args[0] || !args[1]) return std::nullopt;
  auto n = static_cast<std::int64_t>(data.values.size());
  auto bound = [&](double v) {
    auto i = static_cast<std::int64_t>(std::max(-1e18, std::min(1e18, v)));
    return std::max<std::int64_t>(0, std::min(n, i < 0 ? i + n : i));
  };
  std::int64_t step = args.size() > 3 && args[3] ? static_cast<std::int64_t>(args[3]->values.at(0)) : 1;
  if (step <= 0) return std::nullopt;
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
    std::vector<const Known*> in;
    for (const auto& name : node.input()) in.push_back(name.empty() ? nullptr : find(name));
    auto all_known = [&] { return std::all_of(in.begin(), in.end(), [](const Known* k) { return k != nullptr; }); };
    if (op == "Shape") return shape_of(types_, node.input(0), node);
    if (!all_known() && op != "Slice" && op != "Unsqueeze" && op != "Squeeze") return std::nullopt;
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") return arithmetic(op, *in[0], *in[1]);
    if (op == "Gather" && int_attribute(node, "axis").value_or(0) == 0) return gather(*in[0], *in[1]);
    if (op == "Concat") return concat(in);
    if (op == "Slice") return in[0] ? slice(*in[0], {in.begin() + 1, in.end()}) : std::nullopt;
    if (op == "Cast") return cast(node, *in[0]);
    if (op == "Unsqueeze" || op == "Squeeze") return reshaped(node, in);
    return std::nullopt;
  }

 private:
  static std::optional<Known> concat(const std::vector<const Known*>& in) {
    Known out{{0}, {}, false};
    for (const auto* part : in) {
      if (part->dims.size() != 1) return std::nullopt;
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

  // Unsqueeze and Squeeze only change dims; axes come from an attribute (opset < 13) or input 1.
  static std::optional<Known> reshaped(const onnx::NodeProto& node, const std::vector<const Known*>& in) {
    if (!in[0]) return std::nullopt;
    std::vector<std::int64_t> axes = ints_attribute(node, "axes");
    if (in.size() > 1 && in[1]) {
      for (double a : in[1]->values) axes.push_back(static_cast<std::int64_t>(a));
    }
    Known out = *in[0];
    if (node.op_type() == "Unsqueeze") {
      auto rank = static_cast<std::int64_t>(out.dims.size() + axes.size());
      for (auto& a : axes) a = a < 0 ? a + rank : a;
      std::sort(axes.begin(), axes.end());
      for (auto a : axes) out.dims.insert(out.dims.begin() + std::min<std::int64_t>(a, static_cast<std::int64_t>(out.dims.size())), 1);
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

onnx::NodeProto constant_node(const std::string& output, const Known& known) {
  onnx::NodeProto node;
  node.set_op_type("Constant");
  node.add_output(output);
  auto* attr = node.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  auto* tensor = attr->mutable_t();
  for (auto dim : known.dims) tensor->add_dims(dim);
  if (known.floating) {
    tensor->set_data_type(TensorProto::FLOAT);
    for (double v : known.values) tensor->add_float_data(static_cast<float>(v));
  } else {
    tensor->set_data_type(TensorProto::INT64);
    for (double v : known.values) tensor->add_int64_data(static_cast<std::int64_t>(v));
  }
  return node;
}

}  // namespace

bool fold_shape_arithmetic(onnx::GraphProto& graph, const OnnxTypeMap& types) {
  Evaluator evaluator(types);
  for (const auto& init : graph.initializer()) {
    if (auto known = from_tensor(init)) evaluator.remember(init.name(), *known);
  }
  bool folded = false;
  for (auto& node : *graph.mutable_node()) {
    if (node.op_type() == "Constant") {
      if (node.attribute_size() == 1 && node.attribute(0).has_t()) {
        if (auto known = from_tensor(node.attribute(0).t())) evaluator.remember(node.output(0), *known);
      }
      continue;
    }
    if (node.output_size() != 1) continue;
    auto known = evaluator.evaluate(node);
    if (!known || known->values.size() > kMaxElements) continue;
    evaluator.remember(node.output(0), *known);
    node = constant_node(node.output(0), *known);
    folded = true;
  }
  return folded;
}

}  // namespace rannc
