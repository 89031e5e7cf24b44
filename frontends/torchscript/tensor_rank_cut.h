// One tensor rank's stage file, cut from the whole stage (part of the torch plugin): the rank's
// slices of the split weights, each region's ops on its share (a reshape into heads makes heads/t
// heads), and the Megatron-LM collectives (torch_side/tensor_parallel_ops.h) at the region's
// edges: tp_copy before the column ops (its backward all-reduces the input gradient), tp_reduce
// after the row op (its bias added once, after the sum), and the vocabulary's masked lookup.
// The vocabulary head's logits stay split for the runtime's parallel cross entropy. With
// sequence parallelism (the shard's sequence_ops), those ops run on the rank's 1/T of the
// sequence: a region's input is all-gathered and its output reduce-scattered where sequence ops
// read it, other readers of a split value get it all-gathered, and the weights the sequence ops
// read are summed over the group in backward.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <vector>

#include "emit/stage_layout.h"
#include "emit/tensor_rank_share.h"
#include "ir/graph.h"

namespace rannc {

// The values of a rank's stage file that hold 1/T of the sequence, and the collectives that take a
// value between whole and split (emit/tensor_rank_share.h).
using SequenceValues = emit::SequenceValues<torch::jit::Value*>;

class TensorRankCut {
 public:
  using Mapped = std::function<torch::jit::Value*(torch::jit::Value*)>;

  TensorRankCut(const ir::Graph& graph, const emit::TensorShard& shard, int rank);

  // The rank's part of weight `id`: `whole` when the shard does not split it.
  at::Tensor weight(ir::ValueId id, const at::Tensor& whole) const;

  // Appends `node` (op `op` of the model, any op of the stage) to `graph` as the rank runs it,
  // its inputs read through `mapped`; returns the values that stand for the node's outputs.
  // InputError when the op cannot be cut (a size argument that is not a list or an integer, a
  // product kind the cut does not know).
  std::vector<torch::jit::Value*> clone(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                        const Mapped& mapped);
  // What the stage returns for an output: whole, as the next stage or the loss takes it.
  torch::jit::Value* output(torch::jit::Value* value, torch::jit::Graph& graph);

 private:
  torch::jit::Node* clone_reading(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                  const Mapped& mapped);
  std::vector<torch::jit::Value*> clone_region_op(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                                  const Mapped& mapped);
  std::vector<torch::jit::Value*> clone_sequence_op(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                                    const Mapped& mapped);
  std::vector<torch::jit::Value*> clone_whole_op(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                                 const Mapped& mapped);
  void cut_size_arguments(const ir::Op& op, torch::jit::Node* copy, torch::jit::Graph& graph) const;
  torch::jit::Value* divided(torch::jit::Value* size, torch::jit::Graph& graph, const ir::Op& op) const;
  std::vector<torch::jit::Value*> list_entries(torch::jit::Value* list, torch::jit::Graph& graph, const ir::Op& op) const;
  torch::jit::Value* divided_entry(torch::jit::Value* list, int entry, torch::jit::Graph& graph, const ir::Op& op) const;
  std::vector<torch::jit::Value*> reduce_row_op(const ir::Op& op, torch::jit::Node* copy, torch::jit::Graph& graph);
  std::vector<torch::jit::Value*> vocabulary_lookup(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                                    const Mapped& mapped);
  torch::jit::Value* reduced(const ir::Op& op, torch::jit::Value* partial, torch::jit::Graph& graph);

  const ir::Graph& graph_;
  emit::TensorRankShare share_;
  SequenceValues sequence_;
};

}  // namespace rannc
