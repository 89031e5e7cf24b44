// One tensor rank's stage file, cut from the whole stage (part of the torch plugin): the rank's
// slices of the split weights, each region's ops on its share (a reshape into heads makes heads/t
// heads), and the Megatron-LM collectives (torch_side/tensor_parallel_ops.h) at the region's
// edges: tp_copy before the column ops (its backward all-reduces the input gradient), tp_reduce
// after the row op (its bias added once, after the sum), and the vocabulary's masked lookup.
// The vocabulary head's logits stay split for the runtime's parallel cross entropy.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>
#include <map>
#include <vector>

#include "emit/stage_layout.h"
#include "ir/graph.h"

namespace rannc {

class TensorRankCut {
 public:
  using Mapped = std::function<torch::jit::Value*(torch::jit::Value*)>;

  TensorRankCut(const ir::Graph& graph, const emit::TensorShard& shard, int rank);

  // The rank's part of weight `id`: `whole` when the shard does not split it.
  at::Tensor weight(ir::ValueId id, const at::Tensor& whole) const;

  // Whether op `id` belongs to a region the stage splits (then `clone` cuts it).
  bool cuts(ir::OpId id) const { return region_of_op_.count(id) != 0; }

  // Appends `node` (op `op` of the model) to `graph` as the rank runs it, its inputs read
  // through `mapped`; returns the values that stand for the node's outputs. InputError when
  // the op cannot be cut (a size argument that is not a list or an integer, a product kind
  // the cut does not know).
  std::vector<torch::jit::Value*> clone(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                        const Mapped& mapped);

 private:
  const partition::TensorRegion& region_of(ir::OpId id) const { return shard_.regions[region_of_op_.at(id)]; }
  int split_dim(ir::ValueId id) const;
  torch::jit::Value* copied_input(const partition::TensorRegion& region, torch::jit::Value* input,
                                  torch::jit::Graph& graph);
  void cut_size_arguments(const ir::Op& op, torch::jit::Node* copy, torch::jit::Graph& graph) const;
  torch::jit::Value* divided(torch::jit::Value* size, torch::jit::Graph& graph, const ir::Op& op) const;
  std::vector<torch::jit::Value*> list_entries(torch::jit::Value* list, torch::jit::Graph& graph, const ir::Op& op) const;
  torch::jit::Value* divided_entry(torch::jit::Value* list, int entry, torch::jit::Graph& graph, const ir::Op& op) const;
  std::vector<torch::jit::Value*> reduce_row_op(const ir::Op& op, torch::jit::Node* copy, torch::jit::Graph& graph) const;
  std::vector<torch::jit::Value*> vocabulary_lookup(const ir::Op& op, torch::jit::Node* node, torch::jit::Graph& graph,
                                                    const Mapped& mapped) const;

  const ir::Graph& graph_;
  const emit::TensorShard& shard_;
  int rank_;
  std::map<ir::OpId, std::size_t> region_of_op_;
  std::map<ir::ValueId, int> split_dim_;
  std::map<ir::ValueId, partition::SplitWeight> weights_;
  std::map<std::size_t, torch::jit::Value*> copied_;  // region -> its input through tp_copy
};

}  // namespace rannc
