// One tensor rank's stage as generated TorchScript source, for the models whose stages are written
// as source (ONNX, .pt2; compiler/stage_source.h): the rules of emit/tensor_rank_share.h, which
// the TorchScript cut follows on the model's own nodes, written as lines of the stage's forward.
// The writers ask it how each op reads its inputs (the collectives it needs are written before the
// op), what each weight holds (the rank's slices of the split ones) and what a region's size
// arguments become, and hand it a row op's partial sum (summed over the group, then the bias
// added) and the vocabulary embedding's ids (the rank's rows looked up, the others zeroed).
// Pure C++.
#pragma once

#include <functional>
#include <string>

#include "compiler/stage_source.h"
#include "emit/tensor_rank_share.h"

namespace rannc {

class SourceRankCut {
 public:
  // Where the cut writes: a line of the forward (indented by the writer) and a fresh variable name.
  struct Writer {
    std::function<void(const std::string&)> line;
    std::function<std::string()> temp;
  };

  SourceRankCut(const ir::Graph& graph, const emit::TensorShard& shard, int rank)
      : graph_(graph), share_(graph, shard, rank) {}

  const emit::TensorRankShare& share() const { return share_; }
  emit::RankOp role(ir::OpId op) const { return share_.role(op); }
  int degree() const { return share_.degree(); }

  // Weight `id`'s attribute as the rank holds it: its slices along the split dim where the shard splits it.
  void cut_weight(ir::ValueId id, StageAttribute& attribute) const;

  // Writes `op` by `write`, whose lines go to `body`: the collectives its inputs need, which read()
  // writes to `prelude` meanwhile, go before them, whichever line first reads an input. Then a
  // sequence op's outputs (their `variables`) hold the rank's part of the sequence.
  void write_op(const ir::Op& op, std::string& body, std::string& prelude, const StageVariables& variables,
                const std::function<void()>& write);
  // The op write_op is writing, nullptr between ops.
  const ir::Op* writing() const { return writing_; }
  // `expr`, the variable (or attribute) of input `input` of the op being written, as the rank reads it.
  std::string read(ir::ValueId input, const std::string& expr, const Writer& writer);
  // What the stage returns for an output: whole, as the next stage or the loss takes it.
  std::string output(const std::string& variable, const Writer& writer);
  // The sequence dim along which `variable` holds the rank's part, -1 where it is whole.
  int sequence_dim(const std::string& variable) const { return sequence_.dim(variable); }
  // The dim along which `variable`, the rank's `value`, holds its part: the sequence's, or a
  // region's split dim; -1 where it is whole.
  int split_dim(ir::ValueId value, const std::string& variable) const {
    return emit::rank_split_dim(sequence_, share_, variable, value);
  }

  // `variable`, which holds the partial sums of a row op or the vocabulary lookup `op`, becomes
  // their sum over the group, with `bias` (an expression; "" for none) added once after it.
  void sum(const ir::Op& op, const std::string& variable, const std::string& bias, const Writer& writer);

  // The vocabulary embedding, Megatron-LM's VocabParallelEmbedding: `ids` as indices into the
  // rank's rows of the table (`local`; ids outside them look up row 0), and which are `outside`.
  struct Lookup {
    std::string local, outside;
  };
  Lookup vocabulary_ids(const ir::Op& op, const std::string& ids, const Writer& writer) const;
  // The rows looked up (in `variable`) with those of ids outside the rank's rows zeroed, summed over the group.
  void sum_vocabulary_rows(const ir::Op& op, const std::string& variable, const Lookup& lookup, const Writer& writer);

  // A region's size argument along the split dim as the rank's share: a constant divided, one
  // computed at run time divided there ("(x // 2)").
  std::int64_t divided(std::int64_t size) const { return share_.divided(size); }
  std::string divided(const std::string& size) const;

 private:
  emit::SequenceValues<std::string>::Insert collectives(const Writer& writer) const;

  const ir::Graph& graph_;
  emit::TensorRankShare share_;
  emit::SequenceValues<std::string> sequence_;
  const ir::Op* writing_ = nullptr;
};

}  // namespace rannc
