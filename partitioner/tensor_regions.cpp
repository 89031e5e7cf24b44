#include "partitioner/tensor_regions.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <utility>

#include "ir/op_kinds.h"
#include "partitioner/weight_product.h"

namespace rannc::partition {
namespace {

using ir::Graph;
using ir::kNoId;
using ir::Op;
using ir::OpId;
using ir::Value;
using ir::ValueId;
using Shape = std::vector<std::int64_t>;
// Why a candidate cannot be split; nullopt when the step keeps the split.
using Failure = std::optional<std::string>;

// ---------------------------------------------------------------------------------------------
// Reading ops: literal arguments, attributes, kinds

std::optional<std::int64_t> int_literal(const Graph& graph, const Op& op, std::size_t input) {
  if (input >= op.inputs.size()) return std::nullopt;
  const auto& literal = graph.value(op.inputs[input]).literal;
  if (const auto* value = std::get_if<std::int64_t>(&literal)) return *value;
  return std::nullopt;
}

std::optional<Shape> ints_literal(const Graph& graph, const Op& op, std::size_t input) {
  if (input >= op.inputs.size()) return std::nullopt;
  const auto& literal = graph.value(op.inputs[input]).literal;
  if (const auto* value = std::get_if<Shape>(&literal)) return *value;
  return std::nullopt;
}

std::optional<std::int64_t> int_attr(const Op& op, const std::string& name) {
  auto it = op.attrs.find(name);
  if (it == op.attrs.end()) return std::nullopt;
  if (const auto* value = std::get_if<std::int64_t>(&it->second)) return *value;
  return std::nullopt;
}

std::optional<Shape> ints_attr(const Op& op, const std::string& name) {
  auto it = op.attrs.find(name);
  if (it == op.attrs.end()) return std::nullopt;
  if (const auto* value = std::get_if<Shape>(&it->second)) return *value;
  return std::nullopt;
}

int rank_of(const Graph& graph, ValueId id) { return static_cast<int>(graph.value(id).type.shape.size()); }

// A dim as a non-negative index (dims count from the end when negative); may be out of range.
int dim_index(std::int64_t dim, int rank) { return static_cast<int>(dim < 0 ? dim + rank : dim); }

bool is_onnx(const std::string& kind) { return kind.rfind("onnx::", 0) == 0; }

bool kind_in(const std::string& kind, std::initializer_list<const char*> kinds) {
  return std::any_of(kinds.begin(), kinds.end(), [&](const char* k) { return kind == k; });
}

std::string describe(const Graph& graph, OpId id) { return graph.op(id).kind + " (op " + std::to_string(id) + ")"; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Matrix products by a 2-D trainable weight: the column and row ops (weight_product.h)

bool is_matrix_param(const Graph& graph, ValueId id) {
  const Value& value = graph.value(id);
  return value.is_tensor() && value.role == ir::ValueRole::kParam && value.type.shape.size() == 2 &&
         value.type.shape_known();
}

namespace {

// Whether `op` swaps the two dims of a 2-D tensor.
bool is_matrix_transpose(const Graph& graph, const Op& op) {
  std::string kind(ir::functional_kind(op.kind));
  if (kind == "aten::t") return true;
  if (kind == "aten::transpose") {
    auto a = int_literal(graph, op, 1), b = int_literal(graph, op, 2);
    return a && b && dim_index(*a, 2) != dim_index(*b, 2);
  }
  if (kind == "aten::permute") return ints_literal(graph, op, 1) == Shape{1, 0};
  if (kind == "onnx::Transpose") return ints_attr(op, "perm").value_or(Shape{1, 0}) == Shape{1, 0};
  return false;
}

// The weight operand of a product: a 2-D parameter, or one seen through a transpose (a traced
// linear's weight.t(), an exported tied head's Transpose). `in_out`: whether the operand is
// [in, out]; flipped through the transpose.
bool read_weight(const Graph& graph, ValueId operand, bool in_out, WeightProduct& product) {
  if (operand == kNoId) return false;
  OpId producer = graph.value(operand).producer;
  if (!is_matrix_param(graph, operand) && producer != kNoId && is_matrix_transpose(graph, graph.op(producer)) &&
      is_matrix_param(graph, graph.op(producer).inputs[0])) {
    product.transpose = producer;
    operand = graph.op(producer).inputs[0];
    in_out = !in_out;
  }
  if (!is_matrix_param(graph, operand)) return false;
  product.weight = operand;
  product.out_features_dim = in_out ? 1 : 0;
  product.in_features_dim = in_out ? 0 : 1;
  return true;
}

ValueId tensor_input(const Graph& graph, const Op& op, std::size_t input) {
  return input < op.inputs.size() && graph.value(op.inputs[input]).is_tensor() ? op.inputs[input] : kNoId;
}

}  // namespace

std::optional<WeightProduct> weight_product(const Graph& graph, const Op& op) {
  std::string kind(ir::functional_kind(op.kind));
  WeightProduct product;
  ValueId weight = kNoId;
  bool in_out = true;
  if (kind == "aten::linear") {
    product.activation = tensor_input(graph, op, 0), weight = tensor_input(graph, op, 1), in_out = false;
    product.bias = tensor_input(graph, op, 2);
  } else if (kind_in(kind, {"aten::matmul", "aten::mm", "onnx::MatMul"})) {
    product.activation = tensor_input(graph, op, 0), weight = tensor_input(graph, op, 1);
  } else if (kind == "aten::addmm") {
    product.bias = tensor_input(graph, op, 0);
    product.activation = tensor_input(graph, op, 1), weight = tensor_input(graph, op, 2);
  } else if (kind == "onnx::Gemm") {
    if (int_attr(op, "transA").value_or(0) != 0) return std::nullopt;
    product.activation = tensor_input(graph, op, 0), weight = tensor_input(graph, op, 1);
    in_out = int_attr(op, "transB").value_or(0) == 0;
    product.bias = tensor_input(graph, op, 2);
  } else {
    return std::nullopt;
  }
  if (product.activation == kNoId || graph.value(product.activation).is_weight() ||
      !graph.value(product.activation).type.shape_known() || op.outputs.empty() ||
      !read_weight(graph, weight, in_out, product))
    return std::nullopt;
  return product;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Kinds the split passes through

bool is_batched_product(const std::string& kind) {
  return kind_in(kind, {"aten::matmul", "aten::bmm", "onnx::MatMul"});
}

bool is_size_query(const std::string& kind) { return kind_in(kind, {"aten::size", "aten::sym_size"}); }

bool is_reshape(const std::string& kind) {
  return kind_in(kind, {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::flatten", "aten::unflatten",
                        "aten::view_as", "aten::reshape_as", "aten::squeeze", "aten::unsqueeze", "onnx::Reshape",
                        "onnx::Flatten", "onnx::Squeeze", "onnx::Unsqueeze"});
}

bool is_permute(const std::string& kind) {
  return kind_in(kind, {"aten::transpose", "aten::permute", "aten::t", "onnx::Transpose"});
}

// Ops whose output has the input's dims: copies, casts, aliases.
bool keeps_layout(const std::string& kind) {
  return kind_in(kind, {"aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy", "aten::type_as", "aten::alias",
                        "onnx::Cast", "onnx::CastLike", "onnx::Identity"});
}

bool is_chunk(const std::string& kind) {
  return kind_in(kind, {"aten::chunk", "aten::split", "aten::split_with_sizes", "aten::unsafe_chunk",
                        "aten::unsafe_split", "aten::unsafe_split_with_sizes", "onnx::Split"});
}

bool is_concat(const std::string& kind) { return kind_in(kind, {"aten::cat", "aten::concat", "aten::concatenate"}); }

bool is_expand(const std::string& kind) { return kind_in(kind, {"aten::expand", "aten::expand_as", "onnx::Expand"}); }

// The output permutation of a transpose or permute (output dim i is input dim perm[i]).
std::optional<Shape> permutation(const Graph& graph, const Op& op, int rank) {
  std::string kind(ir::functional_kind(op.kind));
  Shape perm(static_cast<std::size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  if (kind == "aten::t") {
    if (rank == 2) std::swap(perm[0], perm[1]);
  } else if (kind == "aten::transpose") {
    auto a = int_literal(graph, op, 1), b = int_literal(graph, op, 2);
    if (!a || !b) return std::nullopt;
    int i = dim_index(*a, rank), j = dim_index(*b, rank);
    if (i < 0 || j < 0 || i >= rank || j >= rank) return std::nullopt;
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  } else if (kind == "aten::permute") {
    auto dims = ints_literal(graph, op, 1);
    if (!dims || static_cast<int>(dims->size()) != rank) return std::nullopt;
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = dim_index((*dims)[i], rank);
  } else {  // onnx::Transpose: reversed dims without a perm
    perm = ints_attr(op, "perm").value_or(Shape(perm.rbegin(), perm.rend()));
  }
  return perm;
}

// Where split dim `d` of `in` lands in `out`, a reshape of it: the output dim whose prefix (the
// product of the dims before it) is the input's prefix before d. The split must stay the outer
// factor of that dim (a merge of [heads, head_dim] into hidden, or hidden into heads x head_dim):
// slice i of every device is then one contiguous block of the dim. Sets `k`, or says why not.
Failure reshaped_dim(const ir::TensorType& in, const ir::TensorType& out, int d, int& k) {
  std::int64_t before = 1;
  for (int i = 0; i < d; ++i) before *= in.shape[static_cast<std::size_t>(i)];
  std::int64_t prefix = 1;
  for (k = 0; k < static_cast<int>(out.shape.size()); ++k) {
    std::int64_t size = out.shape[static_cast<std::size_t>(k)];
    if (prefix == before && size != 1) break;
    if (prefix * size > before && prefix < before)
      return "makes the split dim an inner factor of its dim " + std::to_string(k) +
             " (merged with the dims before it, as heads inside batch x heads)";
    prefix *= size;
  }
  if (k == static_cast<int>(out.shape.size())) return "leaves no dim holding the split dim";
  // Numbers alone cannot tell batch x heads from heads at batch 1: the batch dim decides.
  if (in.batch_dim >= 0 && in.batch_dim < d && out.batch_dim >= k)
    return "merges the split dim with the batch dim (dim " + std::to_string(k) + ": heads an inner factor)";
  std::int64_t size = in.shape[static_cast<std::size_t>(d)], new_size = out.shape[static_cast<std::size_t>(k)];
  if (new_size % size != 0 && size % new_size != 0)
    return "regroups the split dim of " + std::to_string(size) + " into " + std::to_string(new_size);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Following the split of one candidate, from its column ops to its row op

// How a value is split: the dim, and the weights whose slices it comes from (a chunk of the value
// makes those weights grouped).
struct Split {
  int dim = 0;
  std::set<ValueId> weights;
};

class RegionTracer {
 public:
  RegionTracer(const Graph& graph, const std::vector<std::size_t>& position) : graph_(graph), position_(position) {}

  Failure run(const std::vector<OpId>& column_ops) {
    for (OpId id : column_ops)
      if (auto failure = start_column(id)) return failure;
    while (!queue_.empty()) {
      OpId id = queue_.top().second;
      queue_.pop();
      if (auto failure = step(id)) return failure;
    }
    if (row_op_ == kNoId) return "the split reaches no row op";
    return check_weight_readers();
  }

  const std::set<OpId>& ops() const { return ops_; }

  TensorRegion region(const std::vector<OpId>& column_ops, ValueId input) const {
    TensorRegion region;
    region.column_ops = column_ops;
    region.row_op = row_op_;
    region.ops.assign(ops_.begin(), ops_.end());
    for (const auto& [id, weight] : weights_) region.weights.push_back(weight);
    region.input = input;
    region.output = graph_.op(row_op_).outputs.at(0);
    region.divisor = std::max<std::int64_t>(divisor_, 1);
    region.attention_core = attention_core();
    for (const auto& [id, split] : split_) region.split_values.emplace_back(id, split.dim);
    return region;
  }

 private:
  const Graph& graph_;
  const std::vector<std::size_t>& position_;  // op -> index in the topological order
  // Ops still to visit, by topological position: an op is visited after every split input it has.
  std::priority_queue<std::pair<std::size_t, OpId>, std::vector<std::pair<std::size_t, OpId>>, std::greater<>> queue_;
  std::set<OpId> queued_;
  std::map<ValueId, Split> split_;
  std::map<ValueId, SplitWeight> weights_;
  std::set<OpId> ops_;
  std::set<OpId> products_;  // batched products of two split operands
  std::set<OpId> fused_;     // fused attention ops
  OpId row_op_ = kNoId;
  std::int64_t divisor_ = 0;

  const Shape& shape(ValueId id) const { return graph_.value(id).type.shape; }
  std::string name(ValueId id) const { return "%" + graph_.value(id).name; }
  std::string op_text(const Op& op) const { return describe(graph_, op.id); }

  Failure reach(ValueId id, const Split& split) {
    const Value& value = graph_.value(id);
    if (!value.is_tensor() || !value.type.shape_known())
      return "the split reaches " + name(id) + ", whose shape is not known";
    if (value.model_output) return "the split reaches the model output " + name(id);
    auto [it, fresh] = split_.emplace(id, split);
    if (!fresh) return it->second.dim == split.dim ? Failure() : "the split reaches " + name(id) + " along two dims";
    divisor_ = std::gcd(divisor_, value.type.shape[static_cast<std::size_t>(split.dim)]);
    for (OpId consumer : value.consumers)
      if (queued_.insert(consumer).second) queue_.push({position_[static_cast<std::size_t>(consumer)], consumer});
    return std::nullopt;
  }

  // Every tensor output of `op`, split like its first.
  Failure reach_outputs(const Op& op, const Split& split) {
    for (ValueId out : op.outputs) {
      if (!graph_.value(out).is_tensor()) continue;
      if (rank_of(graph_, out) != rank_of(graph_, op.outputs[0]))
        return op_text(op) + " has outputs the split cannot follow";
      if (auto failure = reach(out, split)) return failure;
    }
    return std::nullopt;
  }

  Failure split_weight(ValueId weight, int dim) {
    auto [it, fresh] = weights_.emplace(weight, SplitWeight{weight, dim, 1});
    if (!fresh && it->second.dim != dim) return "weight " + name(weight) + " would split along two dims";
    return std::nullopt;
  }

  // A chunk of a value into `groups` parts along its split dim: each part of the weights it
  // comes from splits by t (a fused QKV's q, k and v).
  Failure set_groups(const Op& op, const Split& split, int groups) {
    for (ValueId weight : split.weights) {
      auto& entry = weights_.at(weight);
      if (entry.groups != 1 && entry.groups != groups)
        return op_text(op) + " cuts weight " + name(weight) + " into " + std::to_string(groups) +
               " parts where it has " + std::to_string(entry.groups);
      entry.groups = groups;
    }
    return std::nullopt;
  }

  // An operand of an op whose output splits along `dim` (of `rank` dims, `size` long), broadcast
  // from the right: fine where it does not reach the dim or is 1 there; a weight of the dim's size
  // splits with it (a bias).
  Failure operand_along(const Op& op, ValueId operand, int rank, int dim, std::int64_t size, Split& split) {
    const Value& value = graph_.value(operand);
    int along = dim - (rank - static_cast<int>(value.type.shape.size()));
    if (along < 0 || (value.type.shape_known() && value.type.shape[static_cast<std::size_t>(along)] == 1))
      return std::nullopt;
    if (value.is_weight() && value.type.shape_known() && value.type.shape[static_cast<std::size_t>(along)] == size) {
      split.weights.insert(operand);
      return split_weight(operand, along);
    }
    return op_text(op) + " reads " + name(operand) + ", neither split nor broadcast along the split dim";
  }

  // The split of input 0, the one input these ops split through.
  const Split* first_input_split(const Op& op) const {
    for (std::size_t i = 1; i < op.inputs.size(); ++i)
      if (split_.count(op.inputs[i])) return nullptr;
    auto it = op.inputs.empty() ? split_.end() : split_.find(op.inputs[0]);
    return it == split_.end() ? nullptr : &it->second;
  }

  Failure start_column(OpId id) {
    const Op& op = graph_.op(id);
    auto product = weight_product(graph_, op);
    ops_.insert(id);
    if (product->transpose != kNoId) ops_.insert(product->transpose);
    ValueId out = op.outputs[0];
    if (!graph_.value(out).type.shape_known()) return "the shape of " + name(out) + " is not known";
    Split split{rank_of(graph_, out) - 1, {product->weight}};
    if (auto failure = split_weight(product->weight, product->out_features_dim)) return failure;
    if (product->bias != kNoId) {
      std::int64_t size = shape(out)[static_cast<std::size_t>(split.dim)];
      if (auto failure = operand_along(op, product->bias, rank_of(graph_, out), split.dim, size, split)) return failure;
    }
    return reach(out, split);
  }

  Failure step(OpId id) {
    const Op& op = graph_.op(id);
    std::string kind(ir::functional_kind(op.kind));
    // A size query of a dim that is not split reads the same on every device: glue, outside.
    if (is_size_query(kind)) return size_query(op);
    ops_.insert(id);
    if (auto product = weight_product(graph_, op)) return row_op(op, *product);
    if (is_batched_product(kind)) return batched_product(op);
    if (kind == "aten::scaled_dot_product_attention") return fused_attention(op);
    if (auto failure = undivided_size(op, kind)) return failure;
    if (is_reshape(kind)) return reshape(op);
    if (is_permute(kind)) return permute(op);
    if (keeps_layout(kind)) return same_layout(op);
    if (is_chunk(kind)) return chunk(op);
    if (kind == "aten::slice") return slice(op);
    if (kind == "onnx::Slice") return onnx_slice(op);
    if (kind == "onnx::Concat") return concat(op, op.inputs, int_attr(op, "axis"));
    if (kind == "prim::ListConstruct") return list_concat(op);
    if (is_expand(kind)) return expand(op);
    switch (ir::op_class_of(kind)) {
      case ir::OpClass::kElementwise:
        return elementwise(op);
      case ir::OpClass::kSoftmax:
        return softmax(op);
      case ir::OpClass::kNorm:
        return norm(op);
      default:
        return "the split reaches " + op_text(op) + ", which does not keep it";
    }
  }

  // A size query reads the whole model's size, as the unsplit model does: of a split dim, the
  // tensor ranks' cut multiplies the rank's share by the degree (HF's repeat_kv reads its number
  // of key/value heads so), and divides again a shape entry along the split dim that it makes.
  // Ops whose size along the split dim the tensor ranks' cuts do not make the rank's share: a
  // shape taken from another tensor (view_as, reshape_as, expand_as: whole where the other is), and
  // unflatten's sizes of the split dim.
  Failure undivided_size(const Op& op, const std::string& kind) {
    if (kind_in(kind, {"aten::view_as", "aten::reshape_as", "aten::expand_as"}))
      return op_text(op) + " takes its shape from another tensor, which a tensor rank's cut does not divide";
    if (kind != "aten::unflatten") return std::nullopt;
    const Split* split = first_input_split(op);
    auto dim = int_literal(graph_, op, 1);
    if (split && (!dim || dim_index(*dim, rank_of(graph_, op.inputs[0])) == split->dim))
      return op_text(op) + " unflattens the split dim into sizes a tensor rank's cut does not divide";
    return std::nullopt;
  }

  Failure size_query(const Op& op) {
    if (!int_literal(graph_, op, 1)) return op_text(op) + " reads a size of a dim not known before it runs";
    return std::nullopt;
  }

  // The region ends at a product contracting the split dim: its weight splits by input features,
  // its output is a partial sum (all-reduced), its bias is added once after that.
  Failure row_op(const Op& op, const WeightProduct& product) {
    auto it = split_.find(product.activation);
    if (it == split_.end()) return "the split reaches " + op_text(op) + " through an operand other than its input";
    if (it->second.dim != rank_of(graph_, product.activation) - 1)
      return op_text(op) + " does not contract the split dim";
    if (row_op_ != kNoId)
      return "the split reaches a second row op, " + op_text(op) + ", after " + describe(graph_, row_op_);
    row_op_ = op.id;
    if (product.transpose != kNoId) ops_.insert(product.transpose);
    return split_weight(product.weight, product.in_features_dim);
  }

  Failure elementwise(const Op& op) {
    ValueId out = op.outputs.empty() ? kNoId : op.outputs[0];
    if (out == kNoId || !graph_.value(out).is_tensor() || !graph_.value(out).type.shape_known())
      return op_text(op) + " has no output of known shape";
    int rank = rank_of(graph_, out);
    Split split{-1, {}};
    for (ValueId in : op.inputs) {
      auto it = split_.find(in);
      if (it == split_.end()) continue;
      int dim = it->second.dim + rank - rank_of(graph_, in);
      if (dim < 0 || dim >= rank) return op_text(op) + " drops the split dim";
      if (split.dim >= 0 && split.dim != dim) return op_text(op) + " combines values split along different dims";
      if (shape(in)[static_cast<std::size_t>(it->second.dim)] != shape(out)[static_cast<std::size_t>(dim)])
        return op_text(op) + " broadcasts the split dim";
      split.dim = dim;
      split.weights.insert(it->second.weights.begin(), it->second.weights.end());
    }
    if (split.dim < 0) return op_text(op) + " reads the split value other than as an operand";
    std::int64_t size = shape(out)[static_cast<std::size_t>(split.dim)];
    for (ValueId in : op.inputs) {
      if (split_.count(in) || !graph_.value(in).is_tensor()) continue;
      if (auto failure = operand_along(op, in, rank, split.dim, size, split)) return failure;
    }
    return reach_outputs(op, split);
  }

  Failure softmax(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    int rank = rank_of(graph_, op.inputs[0]);
    if (is_onnx(op.kind)) {
      // Before opset 13 ONNX normalises every dim from axis on: a split dim before the axis, or
      // the axis the last dim, means the same in every opset.
      auto axis = int_attr(op, "axis");
      if (!axis) return op_text(op) + " has no axis";
      int a = dim_index(*axis, rank);
      if (split->dim >= a && !(a == rank - 1 && split->dim != a)) return op_text(op) + " normalises over the split dim";
      return reach_outputs(op, *split);
    }
    auto axis = int_literal(graph_, op, 1);
    if (!axis) return op_text(op) + " has no known dim";
    if (dim_index(*axis, rank) == split->dim) return op_text(op) + " normalises over the split dim";
    return reach_outputs(op, *split);
  }

  // Layer and RMS norms normalise the last dims: fine when the split dim is before them.
  Failure norm(const Op& op) {
    const Split* split = first_input_split(op);
    std::string kind(ir::functional_kind(op.kind));
    if (!split || !ir::has_op_trait(kind, ir::op_trait::kNormalisesLastDims))
      return "the split reaches " + op_text(op) + ", a normalisation over the split dim";
    int rank = rank_of(graph_, op.inputs[0]);
    std::optional<int> first;
    if (is_onnx(kind)) {
      first = dim_index(int_attr(op, "axis").value_or(-1), rank);
    } else if (auto normalized = ints_literal(graph_, op, 1)) {
      first = rank - static_cast<int>(normalized->size());
    }
    if (!first || split->dim >= *first)
      return "the split reaches " + op_text(op) + ", a normalisation over the split dim";
    return reach_outputs(op, *split);
  }

  Failure reshape(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    if (op.outputs.empty() || !graph_.value(op.outputs[0]).type.shape_known())
      return op_text(op) + " has no output of known shape";
    int k = 0;
    if (auto failure = reshaped_dim(graph_.value(op.inputs[0]).type, graph_.value(op.outputs[0]).type, split->dim, k))
      return op_text(op) + " " + *failure;
    return reach(op.outputs[0], Split{k, split->weights});
  }

  Failure permute(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    auto perm = permutation(graph_, op, rank_of(graph_, op.inputs[0]));
    auto at = perm ? std::find(perm->begin(), perm->end(), split->dim) : Shape::iterator();
    if (!perm || at == perm->end()) return op_text(op) + " has no known permutation";
    return reach(op.outputs.at(0), Split{static_cast<int>(at - perm->begin()), split->weights});
  }

  Failure same_layout(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    return reach(op.outputs.at(0), *split);
  }

  // The parts a chunk or split makes: its outputs, or those of the ListUnpack of its list.
  std::optional<std::vector<ValueId>> parts_of(const Op& op) {
    if (std::all_of(op.outputs.begin(), op.outputs.end(), [&](ValueId id) { return graph_.value(id).is_tensor(); }))
      return op.outputs;
    if (op.outputs.size() != 1) return std::nullopt;
    const auto& consumers = graph_.value(op.outputs[0]).consumers;
    if (consumers.size() != 1 || graph_.op(consumers[0]).kind != "prim::ListUnpack") return std::nullopt;
    ops_.insert(consumers[0]);
    return graph_.op(consumers[0]).outputs;
  }

  Failure chunk(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    auto axis = is_onnx(op.kind) ? int_attr(op, "axis").value_or(0) : int_literal(graph_, op, 2).value_or(0);
    auto parts = parts_of(op);
    if (!parts) return op_text(op) + " makes a list the split cannot follow";
    int dim = dim_index(axis, rank_of(graph_, op.inputs[0]));
    std::int64_t size = shape(op.inputs[0])[static_cast<std::size_t>(split->dim)];
    for (ValueId part : *parts) {
      std::int64_t part_size =
          graph_.value(part).type.shape_known() ? shape(part)[static_cast<std::size_t>(split->dim)] : -1;
      std::int64_t expected = dim == split->dim ? size / static_cast<std::int64_t>(parts->size()) : size;
      if (part_size != expected || (dim == split->dim && size % static_cast<std::int64_t>(parts->size()) != 0))
        return op_text(op) + " cuts the split dim into unequal parts";
    }
    if (dim == split->dim && parts->size() > 1)
      if (auto failure = set_groups(op, *split, static_cast<int>(parts->size()))) return failure;
    Split kept = *split;
    for (ValueId part : *parts)
      if (auto failure = reach(part, kept)) return failure;
    return std::nullopt;
  }

  // aten::slice(x, dim, start, end, step): along another dim it keeps the split; along the split
  // dim it must take one of equal parts (q of a fused QKV), which groups the weights.
  Failure slice(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    int rank = rank_of(graph_, op.inputs[0]);
    if (dim_index(int_literal(graph_, op, 1).value_or(0), rank) != split->dim) return slice_other_dim(op, *split);
    return slice_split_dim(op, *split, int_literal(graph_, op, 2).value_or(0), int_literal(graph_, op, 4).value_or(1));
  }

  // onnx::Slice(data, starts, ends[, axes[, steps]]) (before opset 10: starts, ends and axes as
  // attributes) slices several dims at once: slices of other dims keep the split (the halves of
  // head_dim that rotary embeddings rotate), along the split dim as aten::slice.
  Failure onnx_slice(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    int rank = rank_of(graph_, op.inputs[0]);
    bool attributes = op.inputs.size() == 1;
    auto starts = attributes ? ints_attr(op, "starts") : ints_literal(graph_, op, 1);
    std::optional<Shape> axes, steps;
    if (attributes) {
      axes = ints_attr(op, "axes");
    } else {
      if (op.inputs.size() > 3) axes = ints_literal(graph_, op, 3);
      if (op.inputs.size() > 4) steps = ints_literal(graph_, op, 4);
      if ((op.inputs.size() > 3 && !axes) || (op.inputs.size() > 4 && !steps))
        return op_text(op) + " slices dims that are not known";
    }
    if (!starts) return op_text(op) + " slices dims that are not known";
    if (!axes) {
      axes = Shape(starts->size());
      std::iota(axes->begin(), axes->end(), 0);
    }
    if (axes->size() != starts->size() || (steps && steps->size() != starts->size()))
      return op_text(op) + " slices dims that are not known";
    for (std::size_t i = 0; i < axes->size(); ++i)
      if (dim_index((*axes)[i], rank) == split->dim)
        return slice_split_dim(op, *split, (*starts)[i], steps ? (*steps)[i] : 1);
    return slice_other_dim(op, *split);
  }

  // A slice of other dims than the split one: the split dim keeps its size.
  Failure slice_other_dim(const Op& op, const Split& split) {
    ValueId out = op.outputs.at(0);
    std::int64_t size = shape(op.inputs[0])[static_cast<std::size_t>(split.dim)];
    if (!graph_.value(out).type.shape_known() || rank_of(graph_, out) != rank_of(graph_, op.inputs[0]) ||
        shape(out)[static_cast<std::size_t>(split.dim)] != size)
      return op_text(op) + " changes the split dim";
    return reach(out, split);
  }

  // A slice of the split dim from `start` by `step`: one of equal parts, which groups the weights.
  Failure slice_split_dim(const Op& op, const Split& split, std::int64_t start, std::int64_t step) {
    ValueId out = op.outputs.at(0);
    std::int64_t size = shape(op.inputs[0])[static_cast<std::size_t>(split.dim)];
    if (start < 0) start += size;
    std::int64_t part = graph_.value(out).type.shape_known() ? shape(out)[static_cast<std::size_t>(split.dim)] : 0;
    if (step != 1 || part <= 0 || size % part != 0 || start % part != 0)
      return op_text(op) + " slices the split dim other than into equal parts";
    if (auto failure = set_groups(op, split, static_cast<int>(size / part))) return failure;
    return reach(out, split);
  }

  // A concatenation along another dim than the split one, of values all split along it (rotate_half's
  // cat(-x2, x1) over head_dim), keeps the split. `parts`: the concatenated tensors.
  Failure concat(const Op& op, const std::vector<ValueId>& parts, std::optional<std::int64_t> axis) {
    ValueId out = op.outputs.empty() ? kNoId : op.outputs[0];
    if (out == kNoId || !graph_.value(out).type.shape_known()) return op_text(op) + " has no output of known shape";
    if (!axis) return op_text(op) + " has no known dim";
    int rank = rank_of(graph_, out);
    Split split{-1, {}};
    for (ValueId part : parts) {
      auto it = split_.find(part);
      if (it == split_.end()) return op_text(op) + " joins a split value with " + name(part) + ", which is not split";
      if (rank_of(graph_, part) != rank || (split.dim >= 0 && it->second.dim != split.dim))
        return op_text(op) + " joins values split along different dims";
      split.dim = it->second.dim;
      split.weights.insert(it->second.weights.begin(), it->second.weights.end());
    }
    if (split.dim < 0) return op_text(op) + " joins no tensor";
    if (dim_index(*axis, rank) == split.dim) return op_text(op) + " joins along the split dim";
    return reach(out, split);
  }

  // A list of tensors (TorchScript, torch.export) is split only as the operand of a concatenation:
  // the list and the cat belong to the region.
  Failure list_concat(const Op& op) {
    const auto& consumers = op.outputs.size() == 1 ? graph_.value(op.outputs[0]).consumers : std::vector<OpId>{};
    if (consumers.size() != 1 || !is_concat(std::string(ir::functional_kind(graph_.op(consumers[0]).kind))))
      return "the split reaches " + op_text(op) + ", a list read other than by a concatenation";
    const Op& cat = graph_.op(consumers[0]);
    if (cat.inputs.empty() || cat.inputs[0] != op.outputs[0])
      return op_text(cat) + " reads the split list other than as its input";
    ops_.insert(cat.id);
    return concat(cat, op.inputs, cat.inputs.size() > 1 ? int_literal(graph_, cat, 1) : std::optional<std::int64_t>(0));
  }

  // A broadcast to a larger shape (repeat_kv's expand of each key/value head to its query heads,
  // along a new dim beside the heads) keeps the split where the split dim keeps its size.
  Failure expand(const Op& op) {
    const Split* split = first_input_split(op);
    if (!split) return op_text(op) + " reads the split value other than as its input";
    ValueId out = op.outputs.empty() ? kNoId : op.outputs[0];
    if (out == kNoId || !graph_.value(out).type.shape_known()) return op_text(op) + " has no output of known shape";
    int dim = split->dim + rank_of(graph_, out) - rank_of(graph_, op.inputs[0]);
    if (dim < 0 || shape(out)[static_cast<std::size_t>(dim)] != shape(op.inputs[0])[static_cast<std::size_t>(split->dim)])
      return op_text(op) + " broadcasts the split dim";
    return reach(out, Split{dim, split->weights});
  }

  // A product of two activations ([.., M, K] x [.., K, N]) keeps a split of a batch dim both
  // operands share (the heads of the scores and of the product with V).
  Failure batched_product(const Op& op) {
    ValueId out = op.outputs.empty() ? kNoId : op.outputs[0];
    if (out == kNoId || !graph_.value(out).type.shape_known() || op.inputs.size() < 2)
      return op_text(op) + " has no output of known shape";
    int rank = rank_of(graph_, out);
    Split split{-1, {}};
    for (std::size_t i = 0; i < 2; ++i) {
      auto it = split_.find(op.inputs[i]);
      if (it == split_.end()) continue;
      int in_rank = rank_of(graph_, op.inputs[i]);
      if (it->second.dim >= in_rank - 2) return op_text(op) + " multiplies along the split dim";
      int dim = it->second.dim + rank - in_rank;
      if (dim < 0) return op_text(op) + " drops the split dim";
      if (split.dim >= 0 && split.dim != dim) return op_text(op) + " reads operands split along different dims";
      split.dim = dim;
      split.weights.insert(it->second.weights.begin(), it->second.weights.end());
    }
    for (std::size_t i = 0; i < 2; ++i) {
      if (split_.count(op.inputs[i])) continue;
      std::int64_t size = shape(out)[static_cast<std::size_t>(split.dim)];
      if (graph_.value(op.inputs[i]).is_weight())
        return op_text(op) + " multiplies the split value by weight " + name(op.inputs[i]);
      if (auto failure = operand_along(op, op.inputs[i], rank, split.dim, size, split)) return failure;
    }
    if (split_.count(op.inputs[0]) && split_.count(op.inputs[1])) products_.insert(op.id);
    return reach(out, split);
  }

  // scaled_dot_product_attention(q, k, v, mask, ...): q, k and v split along one batch dim (the
  // heads), the mask broadcast along it.
  Failure fused_attention(const Op& op) {
    if (op.inputs.size() < 3 || op.outputs.empty()) return op_text(op) + " has too few operands";
    Split split{-1, {}};
    for (std::size_t i = 0; i < 3; ++i) {
      auto it = split_.find(op.inputs[i]);
      if (it == split_.end()) return op_text(op) + " reads q, k and v not all split";
      int rank = rank_of(graph_, op.inputs[i]);
      if (it->second.dim >= rank - 2 || (split.dim >= 0 && split.dim != it->second.dim))
        return op_text(op) + " reads q, k and v split along other dims than their heads";
      split.dim = it->second.dim;
      split.weights.insert(it->second.weights.begin(), it->second.weights.end());
    }
    ValueId mask = tensor_input(graph_, op, 3);
    int rank = rank_of(graph_, op.outputs[0]);
    if (mask != kNoId && split_.count(mask)) return op_text(op) + " reads a split mask";
    if (mask != kNoId)
      if (auto failure = operand_along(op, mask, rank, split.dim,
                                       shape(op.outputs[0])[static_cast<std::size_t>(split.dim)], split))
        return failure;
    fused_.insert(op.id);
    return reach(op.outputs[0], split);
  }

  // A split weight read by an op outside the region (a tied embedding) would be read whole there.
  Failure check_weight_readers() const {
    for (const auto& [id, weight] : weights_)
      for (OpId reader : graph_.value(id).consumers)
        if (!ops_.count(reader)) return "weight " + name(id) + " is also read by " + describe(graph_, reader);
    return std::nullopt;
  }

  // The ops between the products that read two split activations (scores = Q K^T, then the
  // product with V): reached from one and reaching another, the products included; and fused
  // attention ops.
  std::vector<OpId> attention_core() const {
    std::vector<OpId> order(ops_.begin(), ops_.end());
    std::sort(order.begin(), order.end(), [&](OpId a, OpId b) {
      return position_[static_cast<std::size_t>(a)] < position_[static_cast<std::size_t>(b)];
    });
    std::set<OpId> after, before;  // strictly after a product, strictly before one
    for (OpId id : order)
      for (ValueId in : graph_.op(id).inputs) {
        OpId producer = graph_.value(in).producer;
        if (producer != kNoId && ops_.count(producer) && (products_.count(producer) || after.count(producer)))
          after.insert(id);
      }
    for (auto it = order.rbegin(); it != order.rend(); ++it)
      for (ValueId out : graph_.op(*it).outputs)
        for (OpId consumer : graph_.value(out).consumers)
          if (ops_.count(consumer) && (products_.count(consumer) || before.count(consumer))) before.insert(*it);
    std::vector<OpId> core;
    for (OpId id : ops_) {
      bool between = after.count(id) && before.count(id);
      bool product = products_.count(id) && (after.count(id) || before.count(id));
      if (between || product || fused_.count(id)) core.push_back(id);
    }
    return core;
  }
};

// ---------------------------------------------------------------------------------------------

// Column candidates grouped by the value they read, in the topological order of their first op.
std::vector<std::pair<ValueId, std::vector<OpId>>> column_groups(const Graph& graph, const std::vector<OpId>& order) {
  std::vector<std::pair<ValueId, std::vector<OpId>>> groups;
  std::map<ValueId, std::size_t> group_of;
  for (OpId id : order) {
    auto product = weight_product(graph, graph.op(id));
    if (!product) continue;
    auto [it, fresh] = group_of.emplace(product->activation, groups.size());
    if (fresh) groups.push_back({product->activation, {}});
    groups[it->second].second.push_back(id);
  }
  for (auto& group : groups) std::sort(group.second.begin(), group.second.end());
  return groups;
}

Failure overlap(const Graph& graph, const std::set<OpId>& ops, const std::vector<int>& region_of_op) {
  for (OpId id : ops)
    if (region_of_op[static_cast<std::size_t>(id)] >= 0)
      return describe(graph, id) + " already belongs to another region";
  return std::nullopt;
}

// Whether a reduction reduces only dims after the sequence (dim 1): a mean or sum over the features
// of each position (an RMS norm's mean of squares, as exported op by op).
bool reduces_within_position(const Graph& graph, const Op& op) {
  std::string kind(ir::functional_kind(op.kind));
  if (op.inputs.empty() || !(kind.rfind("onnx::Reduce", 0) == 0 ||
                             kind_in(kind, {"aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::logsumexp"})))
    return false;
  int rank = rank_of(graph, op.inputs[0]);
  std::optional<Shape> axes = is_onnx(kind) ? ints_attr(op, "axes") : std::nullopt;
  if (!axes && op.inputs.size() > 1) axes = ints_literal(graph, op, 1);
  if (!axes && !is_onnx(kind))
    if (auto axis = int_literal(graph, op, 1)) axes = Shape{*axis};
  return axes && !axes->empty() &&
         std::all_of(axes->begin(), axes->end(), [&](std::int64_t a) { return dim_index(a, rank) >= 2; });
}

// Whether an op computes each position of a sequence from that position alone: a norm over the
// last dims, a reduction over the dims after the sequence or an elementwise op, every batch tensor
// it reads and writes [batch, sequence, ...] with the output's batch and sequence (an elementwise
// operand may broadcast along the features, as an RMS norm's [batch, sequence, 1] scale; a
// broadcast operand without the batch, a bias or a scalar, is whole on every device).
bool works_per_position(const Graph& graph, const Op& op) {
  auto op_class = ir::op_class_of(op.kind);
  bool reduction = op_class == ir::OpClass::kReduction;
  bool per_position = op_class == ir::OpClass::kElementwise ||
                      (op_class == ir::OpClass::kNorm && ir::has_op_trait(op.kind, ir::op_trait::kNormalisesLastDims)) ||
                      (reduction && reduces_within_position(graph, op));
  if (!per_position || op.outputs.empty()) return false;
  const auto& out = graph.value(op.outputs.front()).type;
  if (out.shape.size() < 3 || out.batch_dim != 0 || !out.shape_known()) return false;
  for (ValueId id : op.inputs) {
    const Value& value = graph.value(id);
    if (!value.is_tensor() || !value.batch_dependent || value.type.shape == out.shape) continue;
    const auto& in = value.type.shape;
    if (in.size() != out.shape.size() || in[0] != out.shape[0] || in[1] != out.shape[1]) return false;
    for (std::size_t d = 2; d < in.size(); ++d)
      if (!reduction && in[d] != out.shape[d] && in[d] != 1) return false;
  }
  for (ValueId id : op.outputs)
    if (graph.value(id).model_output) return false;
  return true;
}

std::vector<OpId> sequence_ops(const Graph& graph, const std::vector<int>& region_of_op) {
  std::vector<OpId> ops;
  for (const auto& op : graph.ops())
    if (region_of_op[static_cast<std::size_t>(op.id)] < 0 && works_per_position(graph, op)) ops.push_back(op.id);
  return ops;
}

}  // namespace

bool TensorRegions::allows_degree(int degree) const {
  return std::any_of(regions.begin(), regions.end(), [&](const TensorRegion& r) { return !r.is_vocabulary() && r.allows(degree); });
}

void TensorRegions::add(TensorRegion region) {
  for (OpId id : region.ops) region_of_op[static_cast<std::size_t>(id)] = static_cast<int>(regions.size());
  regions.push_back(std::move(region));
}

TensorRegions find_tensor_regions(const ir::Graph& graph) {
  auto order = graph.topological_order();
  std::vector<std::size_t> position(graph.ops().size());
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = i;

  TensorRegions result;
  result.region_of_op.assign(graph.ops().size(), -1);
  for (const auto& [input, columns] : column_groups(graph, order)) {
    // The column ops of a group already split are the row ops of a region found before.
    if (std::all_of(columns.begin(), columns.end(),
                    [&](OpId id) { return result.region_of_op[static_cast<std::size_t>(id)] >= 0; }))
      continue;
    RegionTracer tracer(graph, position);
    auto failure = tracer.run(columns);
    if (!failure) failure = overlap(graph, tracer.ops(), result.region_of_op);
    if (failure) {
      result.rejected.push_back({columns, *failure});
      continue;
    }
    result.add(tracer.region(columns, input));
  }
  if (!result.regions.empty()) add_vocabulary_regions(graph, result);
  // Ascending by anchor (row op, or the head's product), region_of_op renumbered to match.
  std::vector<std::size_t> index(result.regions.size());
  std::iota(index.begin(), index.end(), 0);
  std::sort(index.begin(), index.end(),
            [&](std::size_t a, std::size_t b) { return result.regions[a].anchor() < result.regions[b].anchor(); });
  auto found = std::move(result.regions);
  result.regions.clear();
  std::fill(result.region_of_op.begin(), result.region_of_op.end(), -1);
  for (std::size_t i : index) result.add(std::move(found[i]));
  if (!result.regions.empty()) result.sequence_ops = sequence_ops(graph, result.region_of_op);
  return result;
}

std::vector<ValueId> key_value_operands(const Graph& graph, const std::vector<OpId>& core) {
  if (core.empty()) return {};
  const Op& first = graph.op(core.front());
  if (ir::has_op_trait(first.kind, ir::op_trait::kFusedAttention) && first.inputs.size() >= 3)
    return {first.inputs[1], first.inputs[2]};
  std::vector<OpId> products;
  for (OpId id : core)
    if (ir::op_class_of(graph.op(id).kind) == ir::OpClass::kMatMul) products.push_back(id);
  if (products.size() < 2 || graph.op(products.front()).inputs.size() < 2 || graph.op(products.back()).inputs.size() < 2)
    return {};
  return {graph.op(products.front()).inputs[1], graph.op(products.back()).inputs[1]};
}

DataMovement movement_before(const Graph& graph, ValueId operand) {
  DataMovement chain;
  for (chain.source = operand;;) {
    const Value& value = graph.value(chain.source);
    if (value.producer == kNoId || value.consumers.size() != 1) break;
    const Op& producer = graph.op(value.producer);
    if (ir::op_class_of(producer.kind) != ir::OpClass::kDataMovement || producer.outputs.size() != 1) break;
    ValueId source = kNoId;
    int sources = 0;
    for (ValueId id : producer.inputs)
      if (graph.value(id).is_tensor() && graph.value(id).batch_dependent && id != source) source = id, ++sources;
    // A slice or select of a fused QKV takes part of its source: the chain ends at its output.
    if (sources != 1 || graph.value(source).type.bytes() > value.type.bytes()) break;
    chain.ops.push_back(producer.id);
    chain.source = source;
  }
  return chain;
}

std::vector<cost::FusedKernel> attention_kernels(const ir::Graph& graph, const TensorRegions& regions) {
  std::vector<cost::FusedKernel> kernels;
  std::vector<bool> in_core(graph.ops().size(), false);
  for (const auto& region : regions.regions) {
    if (region.attention_core.empty()) continue;
    cost::FusedKernel kernel = region.attention_core;
    for (ValueId operand : key_value_operands(graph, region.attention_core))
      for (OpId id : movement_before(graph, operand).ops)
        if (!std::binary_search(region.attention_core.begin(), region.attention_core.end(), id)) kernel.push_back(id);
    std::sort(kernel.begin(), kernel.end());
    kernel.erase(std::unique(kernel.begin(), kernel.end()), kernel.end());
    for (OpId id : kernel) in_core[static_cast<std::size_t>(id)] = true;
    kernels.push_back(std::move(kernel));
  }
  for (const auto& op : graph.ops())
    if (ir::has_op_trait(op.kind, ir::op_trait::kFusedAttention) && !in_core[static_cast<std::size_t>(op.id)])
      kernels.push_back({op.id});
  std::sort(kernels.begin(), kernels.end());
  return kernels;
}

std::vector<cost::FusedKernel> fused_kernels(const ir::Graph& graph, const TensorRegions& regions, plan::Fusion attention,
                                             plan::Fusion elementwise) {
  std::vector<cost::FusedKernel> kernels;
  if (attention == plan::Fusion::kFused) kernels = attention_kernels(graph, regions);
  if (elementwise == plan::Fusion::kFused) {
    auto more = cost::elementwise_kernels(graph, kernels);
    kernels.insert(kernels.end(), more.begin(), more.end());
  }
  std::sort(kernels.begin(), kernels.end());
  return kernels;
}

}  // namespace rannc::partition
