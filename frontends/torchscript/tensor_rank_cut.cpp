#include "frontends/torchscript/tensor_rank_cut.h"

#include <variant>

#include "support/error.h"
#include "torch_side/tensor_rank_slices.h"

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

// The collectives as nodes inserted into `graph`.
SequenceValues::Insert collectives(Graph& graph) {
  return [&graph](const char* op, Value* const& value, int dim) {
    if (dim < 0) return graph.insert(op_symbol(op), {value});
    return graph.insert(op_symbol(op), {value, dim});
  };
}

int normalised_dim(std::int64_t dim, std::size_t rank) {
  return static_cast<int>(dim < 0 ? dim + static_cast<std::int64_t>(rank) : dim);
}

}  // namespace

TensorRankCut::TensorRankCut(const ir::Graph& graph, const emit::TensorShard& shard, int rank)
    : graph_(graph), share_(graph, shard, rank) {}

at::Tensor TensorRankCut::weight(ir::ValueId id, const at::Tensor& whole) const {
  const auto* split = share_.split_weight(id);
  if (!split) return whole;
  return sliced(whole, split->dim, share_.weight_slices(*split, whole.size(split->dim)));
}

std::vector<Value*> TensorRankCut::clone(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  switch (share_.role(op.id)) {
    case emit::RankOp::kVocabularyLookup: return vocabulary_lookup(op, node, graph, mapped);
    case emit::RankOp::kRegion:
    case emit::RankOp::kRowOp: return clone_region_op(op, node, graph, mapped);
    case emit::RankOp::kSequence: return clone_sequence_op(op, node, graph, mapped);
    case emit::RankOp::kWhole: break;
  }
  return clone_whole_op(op, node, graph, mapped);
}

Value* TensorRankCut::output(Value* value, Graph& graph) { return sequence_.whole(value, collectives(graph)); }

// A copy of the node reading each input as the rank does (TensorRankShare::operand), not yet
// inserted: it goes after what its cut inputs need (collectives, divided sizes, a None bias).
Node* TensorRankCut::clone_reading(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  std::size_t index = 0;
  return graph.createClone(node, [&](Value* v) {
    return sequence_.read(mapped(v), share_.operand(op, op.inputs.at(index++)), collectives(graph));
  });
}

std::vector<Value*> TensorRankCut::clone_region_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  Node* copy = clone_reading(op, node, graph, mapped);
  if (share_.role(op.id) == emit::RankOp::kRowOp) return reduce_row_op(op, copy, graph);
  cut_size_arguments(op, copy, graph);
  graph.insertNode(copy);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// A sequence op on the rank's part of the sequence: its outputs are split along it.
std::vector<Value*> TensorRankCut::clone_sequence_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  Node* copy = graph.insertNode(clone_reading(op, node, graph, mapped));
  for (Value* output : copy->outputs())
    if (output->type()->kind() == c10::TypeKind::TensorType) sequence_.mark_split(output, 1);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// Any other op reads its inputs whole; a size query of a split value (along the sequence, or a
// region's) reads it where it is, multiplying the split dim's size by the degree: the whole
// model's size, which a region's shape entry along its split dim divides again.
std::vector<Value*> TensorRankCut::clone_whole_op(const ir::Op& op, Node* node, Graph& graph, const Mapped& mapped) {
  auto size_dim = node->kind() == c10::aten::size && node->inputs().size() == 2 ? torch::jit::toIValue(node->input(1))
                                                                                  : c10::nullopt;
  Value* queried = size_dim && size_dim->isInt() ? mapped(node->input(0)) : nullptr;
  int split = queried ? emit::rank_split_dim(sequence_, share_, queried, op.inputs[0]) : -1;
  if (split >= 0) {
    Node* copy = graph.insertNode(graph.createClone(node, mapped));
    auto rank = graph_.value(op.inputs[0]).type.shape.size();
    if (normalised_dim(size_dim->toInt(), rank) != split) return {copy->output()};
    return {graph.insert(c10::aten::mul, {copy->output(), static_cast<std::int64_t>(share_.degree())})};
  }
  Node* copy = graph.createClone(node, [&](Value* v) { return sequence_.whole(mapped(v), collectives(graph)); });
  graph.insertNode(copy);
  return {copy->outputs().begin(), copy->outputs().end()};
}

// A size argument along the split dim becomes the rank's share: a reshape's or expand's entry
// at its output's split dim, a split's section size and a slice's bounds along its input's.
void TensorRankCut::cut_size_arguments(const ir::Op& op, Node* copy, Graph& graph) const {
  if (kind_is(copy, {"aten::reshape", "aten::view", "aten::expand"})) {
    int dim = share_.divided_shape_entry(op);
    if (dim >= 0) copy->replaceInput(1, divided_entry(copy->input(1), dim, graph, op));
    return;
  }
  bool split = kind_is(copy, {"aten::split", "aten::split_with_sizes", "aten::unsafe_split", "aten::unsafe_split_with_sizes"});
  if (!split && !kind_is(copy, {"aten::slice", "aten::narrow"})) return;
  std::size_t dim_input = split ? 2 : 1;
  if (op.inputs.size() <= dim_input) return;
  const auto* dim = std::get_if<std::int64_t>(&graph_.value(op.inputs[dim_input]).literal);
  if (!dim || !share_.cuts_split_dim(op, *dim)) return;
  if (split) {
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
  if (!constant) return graph.insert(c10::aten::floordiv, {size, static_cast<std::int64_t>(share_.degree())});
  if (!constant->isInt()) throw InputError(op_text(op) + ": a size argument that is not an integer");
  return graph.insertConstant(share_.divided(constant->toInt()));
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
  return sequence_.sum(partial, share_.scatters(op.outputs.at(0)), collectives(graph));
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
  Value* biased = graph.insert(c10::aten::add, {sum, split ? sequence_.shared(bias, collectives(graph)) : bias});
  if (split) sequence_.mark_split(biased, 1);
  return {biased};
}

// Megatron-LM's VocabParallelEmbedding: ids outside the rank's rows look up row 0 and are zeroed,
// and the group sums the rows.
std::vector<Value*> TensorRankCut::vocabulary_lookup(const ir::Op& op, Node* node, Graph& graph,
                                                     const Mapped& mapped) {
  if (!kind_is(node, {"aten::embedding"}) || node->inputs().size() < 2)
    throw InputError(op_text(op) + ": a vocabulary lookup of this kind is not cut for tensor ranks yet");
  auto slice = share_.vocabulary_rows(op.inputs[0]);
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
    lookup->replaceInput(2, graph.insertConstant(share_.local_padding_row(op.inputs[0], padding->toInt())));
  }
  graph.insertNode(lookup);
  Value* rows = graph.insert(c10::aten::masked_fill,
                             {lookup->output(0), graph.insert(c10::aten::unsqueeze, {outside, -1}), 0.0});
  return {reduced(op, rows, graph)};
}

}  // namespace rannc
