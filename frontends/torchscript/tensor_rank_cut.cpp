#include "frontends/torchscript/tensor_rank_cut.h"

#include <ATen/ops/cat.h>

#include <algorithm>
#include <limits>
#include <variant>

#include "plan/tensor_slices.h"
#include "support/error.h"
#include "torch_side/tensor_parallel_ops.h"

namespace rannc {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

c10::Symbol op_symbol(const char* qualified) { return c10::Symbol::fromQualString(qualified); }

bool kind_is(const Node* node, std::initializer_list<const char*> kinds) {
  for (const char* kind : kinds)
    if (node->kind() == op_symbol(kind)) return true;
  return false;
}

// "aten::reshape (op 12)": how errors name an op.
std::string op_text(const ir::Op& op) { return op.kind + " (op " + std::to_string(op.id) + ")"; }

int normalised_dim(std::int64_t dim, std::size_t rank) {
  return static_cast<int>(dim < 0 ? dim + static_cast<std::int64_t>(rank) : dim);
}

}  // namespace

int SequenceValues::dim(Value* value) const {
  auto it = dim_.find(value);
  return it == dim_.end() ? -1 : it->second;
}

Value* SequenceValues::once(std::map<Value*, Value*>& made, Value* value, const std::function<Value*()>& make) {
  auto [it, fresh] = made.emplace(value, nullptr);
  if (fresh) it->second = make();
  return it->second;
}

Value* SequenceValues::whole(Value* value, Graph& graph) {
  int at = dim(value);
  if (at < 0) return value;
  return once(joined_, value, [&] { return graph.insert(op_symbol(tp::kJoin), {value, at}); });
}

Value* SequenceValues::split(Value* value, int at, Graph& graph) {
  if (dim(value) >= 0) return value;
  return once(split_, value, [&] {
    Value* chunk = graph.insert(op_symbol(tp::kSplit), {value, at});
    mark_split(chunk, at);
    return chunk;
  });
}

Value* SequenceValues::shared(Value* value, Graph& graph) {
  return once(shared_, value, [&] { return graph.insert(op_symbol(tp::kCopy), {value}); });
}

Value* SequenceValues::region_input(Value* value, Graph& graph) {
  int at = dim(value);
  if (at < 0) return shared(value, graph);
  return once(gathered_, value, [&] { return graph.insert(op_symbol(tp::kGather), {value, at}); });
}

TensorRankCut::TensorRankCut(const ir::Graph& graph, const emit::TensorShard& shard, int rank)
    : graph_(graph), shard_(shard), rank_(rank) {
  for (std::size_t r = 0; r < shard.regions.size(); ++r) {
    const auto& region = shard.regions[r];
    for (auto op : region.ops) region_of_op_[op] = r;
    for (const auto& [value, dim] : region.split_values) split_dim_[value] = dim;
    for (const auto& weight : region.weights) weights_[weight.weight] = weight;
  }
  // A sequence the degree does not divide stays whole (the sequence op runs whole).
  for (auto op : shard.sequence_ops) {
    const auto& shape = graph.value(graph.op(op).outputs.at(0)).type.shape;
    if (shape.size() >= 2 && shape[1] % shard.degree == 0) sequence_ops_.insert(op);
  }
}

int TensorRankCut::split_dim(ir::ValueId id) const {
  auto it = split_dim_.find(id);
  return it == split_dim_.end() ? -1 : it->second;
}

bool TensorRankCut::feeds_sequence_op(ir::ValueId id) const {
  const auto& consumers = graph_.value(id).consumers;
  return std::any_of(consumers.begin(), consumers.end(), [&](ir::OpId op) { return runs_split(op); });
}

at::Tensor TensorRankCut::weight(ir::ValueId id, const at::Tensor& whole) const {
  auto it = weights_.find(id);
  if (it == weights_.end()) return whole;
  const auto& split = it->second;
  std::vector<at::Tensor> parts;
  for (const auto& slice : plan::weight_slices(whole.size(split.dim), split.groups, shard_.degree, rank_))
    parts.push_back(whole.narrow(split.dim, slice.begin, slice.length));
  return at::cat(parts, split.dim).contiguous();
}

std::vector<Value*> TensorRankCut::clone(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  if (region_of_op_.count(op.id)) return clone_region_op(op, node, graph, mapped);
  if (runs_split(op.id)) return clone_sequence_op(op, node, graph, mapped);
  return clone_whole_op(op, node, graph, mapped);
}

std::vector<Value*> TensorRankCut::clone_region_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  const auto& region = shard_.regions[region_of_op_.at(op.id)];
  if (region.kind == plan::RegionKind::kVocabularyEmbedding) return vocabulary_lookup(op, node, graph, mapped);
  bool column = std::find(region.column_ops.begin(), region.column_ops.end(), op.id) != region.column_ops.end();
  std::size_t index = 0;
  // The copy is inserted after what its cut inputs need (collectives, divided sizes, a None bias).
  Node* copy = graph.createClone(node, [&](Value* v) {
    bool reads_input = column && op.inputs.at(index++) == region.input;
    return reads_input ? sequence_.region_input(mapped(v), graph) : sequence_.whole(mapped(v), graph);
  });
  if (op.id == region.row_op) return reduce_row_op(op, copy, graph);
  cut_size_arguments(op, copy, graph);
  graph.insertNode(copy);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// A sequence op on the rank's part of the sequence: each operand that runs along the sequence
// (a [batch, sequence, ...] activation, a [sequence, features] position table) split along it,
// the others (weights, biases, scalars) whole, their gradients summed over the group.
std::vector<Value*> TensorRankCut::clone_sequence_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  const auto& out = graph_.value(op.outputs.at(0)).type.shape;
  std::size_t index = 0;
  Node* copy = graph.createClone(node, [&](Value* v) {
    const auto& operand = graph_.value(op.inputs.at(index++));
    if (!operand.is_tensor()) return mapped(v);
    const auto& shape = operand.type.shape;
    int along = 1 - static_cast<int>(out.size()) + static_cast<int>(shape.size());  // its dim under the sequence
    bool sequence = along >= 0 && shape.size() <= out.size() && shape[static_cast<std::size_t>(along)] == out[1];
    return sequence ? sequence_.split(mapped(v), along, graph) : sequence_.shared(sequence_.whole(mapped(v), graph), graph);
  });
  graph.insertNode(copy);
  for (Value* output : copy->outputs())
    if (output->type()->kind() == c10::TypeKind::TensorType) sequence_.mark_split(output, 1);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// Any other op reads its inputs whole; a size query of a split value reads it where it is,
// multiplying the sequence dim's size by the degree.
std::vector<Value*> TensorRankCut::clone_whole_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  auto size_dim = node->kind() == c10::aten::size && node->inputs().size() == 2 ? torch::jit::toIValue(node->input(1))
                                                                                  : c10::nullopt;
  Value* queried = size_dim && size_dim->isInt() ? mapped(node->input(0)) : nullptr;
  if (queried && sequence_.dim(queried) >= 0) {
    Node* copy = graph.insertNode(graph.createClone(node, mapped));
    auto rank = graph_.value(op.inputs[0]).type.shape.size();
    if (normalised_dim(size_dim->toInt(), rank) != sequence_.dim(queried)) return {copy->output()};
    return {graph.insert(c10::aten::mul, {copy->output(), static_cast<std::int64_t>(shard_.degree)})};
  }
  Node* copy = graph.createClone(node, [&](Value* v) { return sequence_.whole(mapped(v), graph); });
  graph.insertNode(copy);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// A size argument along the split dim becomes the rank's share: a reshape's or expand's entry
// at its output's split dim, a split's section size and a slice's bounds along its input's.
void TensorRankCut::cut_size_arguments(const ir::Op& op, Node* copy, Graph& graph) const {
  if (kind_is(copy, {"aten::reshape", "aten::view", "aten::expand"})) {
    int dim = op.outputs.empty() ? -1 : split_dim(op.outputs[0]);
    if (dim >= 0) copy->replaceInput(1, divided_entry(copy->input(1), dim, graph, op));
    return;
  }
  bool sized = kind_is(copy, {"aten::split", "aten::split_with_sizes", "aten::slice", "aten::narrow"});
  if (!sized || op.inputs.empty() || split_dim(op.inputs[0]) < 0) return;
  auto dim_literal = graph_.value(op.inputs.at(kind_is(copy, {"aten::split", "aten::split_with_sizes"}) ? 2 : 1)).literal;
  auto rank = graph_.value(op.inputs[0]).type.shape.size();
  const auto* dim = std::get_if<std::int64_t>(&dim_literal);
  if (!dim || normalised_dim(*dim, rank) != split_dim(op.inputs[0])) return;
  if (kind_is(copy, {"aten::split", "aten::split_with_sizes"})) {
    copy->replaceInput(1, divided(copy->input(1), graph, op));
  } else {  // slice(x, dim, start, end, step), narrow(x, dim, start, length)
    copy->replaceInput(2, divided(copy->input(2), graph, op));
    copy->replaceInput(3, divided(copy->input(3), graph, op));
  }
}

// An int, or each int of a list (split_with_sizes), divided by the degree.
Value* TensorRankCut::divided(Value* size, Graph& graph, const ir::Op& op) const {
  if (size->type()->kind() == c10::TypeKind::ListType) {
    auto entries = list_entries(size, graph, op);
    for (auto& entry : entries) entry = divided(entry, graph, op);
    return graph.insertNode(graph.createList(c10::IntType::get(), entries))->output();
  }
  auto constant = torch::jit::toIValue(size);
  if (!constant) return graph.insert(c10::aten::floordiv, {size, static_cast<std::int64_t>(shard_.degree)});
  if (!constant->isInt()) throw InputError(op_text(op) + ": a size argument that is not an integer");
  // A slice to the end (INT64_MAX) stays one.
  if (constant->toInt() == std::numeric_limits<std::int64_t>::max()) return size;
  return graph.insertConstant(constant->toInt() / shard_.degree);
}

// The values of an int list: a ListConstruct's inputs, or a constant's entries as constants.
std::vector<Value*> TensorRankCut::list_entries(Value* list, Graph& graph, const ir::Op& op) const {
  if (list->node()->kind() == c10::prim::ListConstruct) return {list->node()->inputs().begin(), list->node()->inputs().end()};
  auto constant = torch::jit::toIValue(list);
  if (!constant || !constant->isIntList())
    throw InputError(op_text(op) + ": its shape is computed at run time, which a tensor rank's cut cannot divide "
                     "(plan with --tensor-parallel 1)");
  std::vector<Value*> entries;
  for (auto value : constant->toIntVector()) entries.push_back(graph.insertConstant(value));
  return entries;
}

// A shape list with entry `entry` divided by the degree (-1, an inferred size, stays).
Value* TensorRankCut::divided_entry(Value* list, int entry, Graph& graph, const ir::Op& op) const {
  auto entries = list_entries(list, graph, op);
  if (entry >= static_cast<int>(entries.size())) throw InputError(op_text(op) + ": a shape shorter than its split dim");
  auto constant = torch::jit::toIValue(entries[entry]);
  if (!(constant && constant->isInt() && constant->toInt() == -1)) entries[entry] = divided(entries[entry], graph, op);
  return graph.insertNode(graph.createList(c10::IntType::get(), entries))->output();
}

// The group's sum of a row op's partial sums: reduce-scattered along the sequence where sequence
// ops read it, else all-reduced.
Value* TensorRankCut::reduced(const ir::Op& op, Value* partial, Graph& graph) {
  if (!feeds_sequence_op(op.outputs.at(0))) return graph.insert(op_symbol(tp::kReduce), {partial});
  Value* chunk = graph.insert(op_symbol(tp::kReduceScatter), {partial, 1});
  sequence_.mark_split(chunk, 1);
  return chunk;
}

// The row op's partial sums summed over the group, then its bias added once (on the rank's part
// of the sequence, its gradient summed over the group).
std::vector<Value*> TensorRankCut::reduce_row_op(const ir::Op& op, Node* copy, Graph& graph) {
  Value* bias = nullptr;
  if (kind_is(copy, {"aten::linear"})) {
    if (copy->inputs().size() > 2 && copy->input(2)->type()->kind() != c10::TypeKind::NoneType) bias = copy->input(2);
    if (bias) copy->replaceInput(2, graph.insertConstant(c10::IValue()));
  } else if (!kind_is(copy, {"aten::matmul", "aten::mm"})) {
    throw InputError(op_text(op) + ": a row-parallel product of this kind is not cut for tensor ranks yet "
                     "(plan with --tensor-parallel 1)");
  }
  graph.insertNode(copy);
  Value* sum = reduced(op, copy->output(0), graph);
  if (!bias) return {sum};
  bool split = sequence_.dim(sum) >= 0;
  Value* biased = graph.insert(c10::aten::add, {sum, split ? sequence_.shared(bias, graph) : bias});
  if (split) sequence_.mark_split(biased, 1);
  return {biased};
}

// Megatron-LM's VocabParallelEmbedding: ids outside the rank's rows look up row 0 and are zeroed,
// and the group sums the rows.
std::vector<Value*> TensorRankCut::vocabulary_lookup(const ir::Op& op, Node* node, Graph& graph,
                                                     const Mapped& mapped) {
  if (!kind_is(node, {"aten::embedding"}) || node->inputs().size() < 2)
    throw InputError(op_text(op) + ": a vocabulary lookup of this kind is not cut for tensor ranks yet");
  const auto& table = graph_.value(op.inputs[0]);
  auto slice = plan::tensor_slice(table.type.shape.at(0), shard_.degree, rank_);
  Value* ids = mapped(node->input(1));
  Value* outside = graph.insert(c10::aten::logical_or, {graph.insert(c10::aten::lt, {ids, slice.begin}),
                                                        graph.insert(c10::aten::ge, {ids, slice.begin + slice.length})});
  Value* local = graph.insert(c10::aten::sub, {ids, slice.begin});
  local = graph.insert(c10::aten::masked_fill, {local, outside, 0});
  Node* lookup = graph.createClone(node, [&](Value* v) { return v == node->input(1) ? local : mapped(v); });
  if (lookup->inputs().size() > 2) {
    // The padding row, if the rank holds it, by its local index; -1 (none) otherwise.
    auto padding = torch::jit::toIValue(lookup->input(2));
    if (!padding || !padding->isInt())
      throw InputError(op_text(op) + ": a lookup whose padding index is computed at run time");
    std::int64_t row = padding->toInt() - slice.begin;
    bool here = padding->toInt() >= 0 && row >= 0 && row < slice.length;
    lookup->replaceInput(2, graph.insertConstant(here ? row : std::int64_t{-1}));
  }
  graph.insertNode(lookup);
  Value* rows = graph.insert(c10::aten::masked_fill,
                             {lookup->output(0), graph.insert(c10::aten::unsqueeze, {outside, -1}), 0.0});
  return {reduced(op, rows, graph)};
}

}  // namespace rannc
