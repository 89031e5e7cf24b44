// What one tensor rank of a tensor-parallel stage (emit::TensorShard) computes of each op, over the
// IR: the rules that cut a stage for a rank, which both writers of rank files follow, the
// TorchScript cut (frontends/torchscript/tensor_rank_cut.h) on the model's nodes and the cut of
// generated source (compiler/source_rank_cut.h) for ONNX and .pt2 models. A region's ops compute
// the rank's share (its slices of the split weights, size arguments along the split dim divided
// by the degree), a row op's partial sums are summed over the group, the vocabulary embedding
// looks up the rank's rows, and with sequence parallelism the stage's sequence ops run on the
// rank's 1/T of the sequence. Pure C++.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "emit/stage_layout.h"
#include "plan/tensor_collectives.h"
#include "plan/tensor_slices.h"

namespace rannc::emit {

// What an op of the stage is to a rank.
enum class RankOp {
  kWhole,             // runs whole, reading its inputs whole
  kRegion,            // computes its share of a region, a column op reading the region's input through the group
  kRowOp,             // a region's row op: its partial sums are summed over the group, its bias added once after
  kVocabularyLookup,  // the vocabulary embedding: looks up the ids in the rank's rows, the group sums them
  kSequence,          // a sequence op: runs on the rank's part of the sequence
};

// How an op reads one of its inputs on a rank.
struct OperandRead {
  enum class Kind {
    kAsIs,         // a sequence op's operand that is no tensor
    kWhole,        // whole: all-gathered along the sequence where split (tp_join)
    kRegionInput,  // a column op's input: gathered along the sequence where split (tp_gather), else through tp_copy
    kSequence,     // the rank's part along `dim`: a whole value cut (tp_split)
    kShared,       // whole and through tp_copy (its gradient summed over the group): weights a sequence op reads
  };
  Kind kind = Kind::kWhole;
  int dim = -1;
};

class TensorRankShare {
 public:
  TensorRankShare(const ir::Graph& graph, const TensorShard& shard, int rank);

  int degree() const { return shard_.degree; }
  RankOp role(ir::OpId op) const;
  // The dim along which a region splits `value`, -1 where none does.
  int split_dim(ir::ValueId value) const;
  OperandRead operand(const ir::Op& op, ir::ValueId input) const;
  // Whether the group's sum of a partial `value` (a row op's, the lookup's) is reduce-scattered
  // along the sequence, where sequence ops read it, rather than all-reduced.
  bool scatters(ir::ValueId value) const;

  // The split of a weight, nullptr where the shard does not split it.
  const partition::SplitWeight* split_weight(ir::ValueId weight) const;
  // The rank's slices of a split weight along its split dim, of `size` elements there.
  std::vector<plan::DimSlice> weight_slices(const partition::SplitWeight& split, std::int64_t size) const;
  // The rank's rows of a vocabulary lookup's `table`.
  plan::DimSlice vocabulary_rows(ir::ValueId table) const;
  // A lookup's padding index in the rank's rows: its local row where the rank holds it, else -1 (none).
  std::int64_t local_padding_row(ir::ValueId table, std::int64_t padding) const;

  // Size arguments of a region's ops along the split dim are the rank's share: the entry of a
  // reshape's, view's or expand's shape at its output's split dim (-1: none), and a split's sizes
  // or a slice's bounds where it cuts its input along the split dim.
  int divided_shape_entry(const ir::Op& op) const;
  bool cuts_split_dim(const ir::Op& op, std::int64_t dim) const;
  // A constant size as the rank's share: INT64_MAX (a slice to the end) stays.
  std::int64_t divided(std::int64_t size) const;

 private:
  bool runs_split(ir::OpId op) const { return sequence_ops_.count(op) != 0; }

  const ir::Graph& graph_;
  const TensorShard& shard_;
  int rank_;
  std::map<ir::OpId, std::size_t> region_of_op_;
  std::map<ir::ValueId, int> split_dim_;
  std::map<ir::ValueId, partition::SplitWeight> weights_;
  std::set<ir::OpId> sequence_ops_;  // those whose sequence the degree divides
};

// The values of a rank's stage that hold 1/T of the sequence (split along their sequence dim),
// and the collectives that take a value between whole and split, each made once per value:
// `Handle` is the TorchScript cut's graph value or the generated source's variable.
template <typename Handle>
class SequenceValues {
 public:
  // Makes collective `op` (plan/tensor_collectives.h) of `value`: op(value) where `dim` is -1, else op(value, dim).
  using Insert = std::function<Handle(const char* op, const Handle& value, int dim)>;

  int dim(const Handle& value) const {
    auto it = dim_.find(value);
    return it == dim_.end() ? -1 : it->second;
  }
  void mark_split(const Handle& value, int dim) { dim_[value] = dim; }

  // The value whole: a split one all-gathered (tp_join; backward takes the rank's chunk).
  Handle whole(const Handle& value, const Insert& insert) {
    int at = dim(value);
    if (at < 0) return value;
    return once(joined_, value, [&] { return insert(tp::kJoin, value, at); });
  }
  // The value split along `at`: a whole one cut to the rank's chunk (tp_split; backward gathers).
  Handle split(const Handle& value, int at, const Insert& insert) {
    if (dim(value) >= 0) return value;
    return once(split_, value, [&] {
      Handle chunk = insert(tp::kSplit, value, at);
      mark_split(chunk, at);
      return chunk;
    });
  }
  // A value read by every rank whose gradient each rank has in part: tp_copy sums it.
  Handle shared(const Handle& value, const Insert& insert) {
    return once(shared_, value, [&] { return insert(tp::kCopy, value, -1); });
  }
  // A region's input as its column ops read it: a split one all-gathered (tp_gather, backward
  // reduce-scattered), a whole one through tp_copy (backward all-reduced).
  Handle region_input(const Handle& value, const Insert& insert) {
    int at = dim(value);
    if (at < 0) return shared(value, insert);
    return once(gathered_, value, [&] { return insert(tp::kGather, value, at); });
  }
  // The value as an op reads it (TensorRankShare::operand).
  Handle read(const Handle& value, const OperandRead& how, const Insert& insert) {
    switch (how.kind) {
      case OperandRead::Kind::kAsIs: return value;
      case OperandRead::Kind::kWhole: return whole(value, insert);
      case OperandRead::Kind::kRegionInput: return region_input(value, insert);
      case OperandRead::Kind::kSequence: return split(value, how.dim, insert);
      case OperandRead::Kind::kShared: return shared(whole(value, insert), insert);
    }
    return value;
  }
  // The group's sum of partial sums: reduce-scattered along the sequence (dim 1) where `scatter`, else all-reduced.
  Handle sum(const Handle& partial, bool scatter, const Insert& insert) {
    if (!scatter) return insert(tp::kReduce, partial, -1);
    Handle chunk = insert(tp::kReduceScatter, partial, 1);
    mark_split(chunk, 1);
    return chunk;
  }

 private:
  template <typename Make>
  Handle once(std::map<Handle, Handle>& made, const Handle& value, const Make& make) {
    if (auto it = made.find(value); it != made.end()) return it->second;
    Handle result = make();
    made.emplace(value, result);
    return result;
  }
  std::map<Handle, int> dim_;
  std::map<Handle, Handle> joined_, split_, shared_, gathered_;
};

// The dim along which `handle`, the rank's `value`, holds its part: the sequence's where it runs
// split, else its region's split dim; -1 where it is whole. (A size query of that dim reads the
// rank's share, which both cuts multiply by the degree.)
template <typename Handle>
int rank_split_dim(const SequenceValues<Handle>& sequence, const TensorRankShare& share, const Handle& handle,
                   ir::ValueId value) {
  int dim = sequence.dim(handle);
  return dim >= 0 ? dim : share.split_dim(value);
}

}  // namespace rannc::emit
