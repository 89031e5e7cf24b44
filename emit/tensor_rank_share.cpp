#include "emit/tensor_rank_share.h"

#include <algorithm>
#include <limits>

namespace rannc::emit {

TensorRankShare::TensorRankShare(const ir::Graph& graph, const TensorShard& shard, int rank)
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

RankOp TensorRankShare::role(ir::OpId op) const {
  auto it = region_of_op_.find(op);
  if (it == region_of_op_.end()) return runs_split(op) ? RankOp::kSequence : RankOp::kWhole;
  const auto& region = shard_.regions[it->second];
  if (region.kind == plan::RegionKind::kVocabularyEmbedding) return RankOp::kVocabularyLookup;
  return op == region.row_op ? RankOp::kRowOp : RankOp::kRegion;
}

OperandRead TensorRankShare::operand(const ir::Op& op, ir::ValueId input) const {
  using Kind = OperandRead::Kind;
  switch (role(op.id)) {
    case RankOp::kRegion:
    case RankOp::kRowOp: {
      std::size_t r = region_of_op_.at(op.id);
      const auto& region = shard_.regions[r];
      bool column = std::find(region.column_ops.begin(), region.column_ops.end(), op.id) != region.column_ops.end();
      if (column && input == region.input) return {Kind::kRegionInput};
      // A tensor from outside the region that it reads whole (a learnable scale, a norm's weight
      // over head_dim) gets from each rank the gradient of its part of the region only: summed
      // over the group. Not the row op's bias, added once after the sum.
      const auto& operand = graph_.value(input);
      auto producer = region_of_op_.find(operand.producer);
      bool from_outside = producer == region_of_op_.end() || producer->second != r;
      bool partial = operand.is_tensor() && from_outside && split_dim(input) < 0 && !split_weight(input);
      return {partial && role(op.id) != RankOp::kRowOp ? Kind::kShared : Kind::kWhole};
    }
    case RankOp::kSequence: {
      // An operand that runs along the sequence (a [batch, sequence, ...] activation, a
      // [sequence, features] position table) is split along it; the others (weights, biases,
      // scalars) are read whole, their gradients summed over the group.
      const auto& operand = graph_.value(input);
      if (!operand.is_tensor()) return {Kind::kAsIs};
      const auto& out = graph_.value(op.outputs.at(0)).type.shape;
      const auto& shape = operand.type.shape;
      int along = 1 - static_cast<int>(out.size()) + static_cast<int>(shape.size());  // its dim under the sequence
      bool sequence = along >= 0 && shape.size() <= out.size() && shape[static_cast<std::size_t>(along)] == out[1];
      return sequence ? OperandRead{Kind::kSequence, along} : OperandRead{Kind::kShared};
    }
    case RankOp::kVocabularyLookup:
    case RankOp::kWhole: break;
  }
  return {Kind::kWhole};
}

bool TensorRankShare::scatters(ir::ValueId value) const {
  const auto& consumers = graph_.value(value).consumers;
  return std::any_of(consumers.begin(), consumers.end(), [&](ir::OpId op) { return runs_split(op); });
}

const partition::SplitWeight* TensorRankShare::split_weight(ir::ValueId weight) const {
  auto it = weights_.find(weight);
  return it == weights_.end() ? nullptr : &it->second;
}

std::vector<plan::DimSlice> TensorRankShare::weight_slices(const partition::SplitWeight& split, std::int64_t size) const {
  return plan::weight_slices(size, split.groups, shard_.degree, rank_);
}

plan::DimSlice TensorRankShare::vocabulary_rows(ir::ValueId table) const {
  return plan::tensor_slice(graph_.value(table).type.shape.at(0), shard_.degree, rank_);
}

std::int64_t TensorRankShare::local_padding_row(ir::ValueId table, std::int64_t padding) const {
  auto rows = vocabulary_rows(table);
  std::int64_t row = padding - rows.begin;
  return padding >= 0 && row >= 0 && row < rows.length ? row : -1;
}

int TensorRankShare::split_dim(ir::ValueId value) const {
  auto it = split_dim_.find(value);
  return it == split_dim_.end() ? -1 : it->second;
}

int TensorRankShare::divided_shape_entry(const ir::Op& op) const {
  return op.outputs.empty() ? -1 : split_dim(op.outputs[0]);
}

bool TensorRankShare::cuts_split_dim(const ir::Op& op, std::int64_t dim) const {
  if (op.inputs.empty() || split_dim(op.inputs[0]) < 0) return false;
  auto rank = static_cast<std::int64_t>(graph_.value(op.inputs[0]).type.shape.size());
  return (dim < 0 ? dim + rank : dim) == split_dim(op.inputs[0]);
}

std::int64_t TensorRankShare::divided(std::int64_t size) const {
  if (size == std::numeric_limits<std::int64_t>::max()) return size;
  return size / shard_.degree;
}

}  // namespace rannc::emit
