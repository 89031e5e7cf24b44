// Tensor parallelism found in a graph, the Megatron way, without the user marking anything.
//
// A region runs split across the t devices of a tensor-parallel group: it starts at one or more
// matrix products that read the same input and whose weights split by output features (column
// ops: an MLP's first linear, the Q, K and V projections, a fused QKV), runs through ops that
// keep the split (bias adds, activations, a gate's product, the reshape into heads, the
// per-head attention core: scores, scaling, masking, softmax, dropout, the product with V), and
// ends at one matrix product whose weight splits by input features (the row op: the MLP's second
// linear, the attention's output projection). Each device computes 1/t of every op of the
// region; the row op's output is a partial sum, all-reduced in the forward pass, and the
// column ops' input gradient is all-reduced in the backward pass.
//
// The analysis follows which dim of each value is split from the column ops onward, through
// elementwise ops (a broadcast operand of size 1 along that dim, or a weight split along it),
// reshapes that keep it an outer factor (hidden into heads x head_dim and back), transposes and
// permutes, chunks and splits along it (a fused QKV: each chunk's slice of the weight splits by
// t), slices and concatenations of other dims (rotary embeddings' halves of head_dim), expands
// that keep its size (grouped-query attention's repeat_kv: each device's key/value heads and the
// query heads that share them), and batched matrix products where both operands split the same
// batch dim. A size query of any dim is glue outside the region: it reads the whole model's size
// (Hugging Face's repeat_kv reads its number of key/value heads so), which each tensor rank's cut
// computes as its share times the degree. A candidate whose split reaches anything else (a
// reduction or normalisation over the split dim, a model output, a value read outside the region,
// a size the ranks' cuts do not divide: view_as, reshape_as, expand_as, unflatten of the split
// dim) is rejected with the reason, and stays replicated.
//
// A language model's vocabulary splits too (Megatron-LM's VocabParallelEmbedding and parallel
// cross entropy; partitioner/vocabulary_regions.cpp): the token embedding's table by rows, each
// device looking up the tokens of its rows and the group all-reducing the sum, and the output
// layer by vocabulary, each device making the logits of its slice, which stay split: the runtime's
// cross entropy reduces the maxima, the sums of exponentials and the targets' logits across the
// group. A vocabulary the degree does not divide is split as torch.tensor_split splits it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cost_model/op_work.h"
#include "ir/graph.h"
#include "plan/options.h"

namespace rannc::partition {

// A weight of a region, split into t equal slices along `dim`. With groups > 1 the dim is
// `groups` equal parts (a fused QKV's q, k and v) and each part splits into t slices: rank i
// holds slice i of every part.
struct SplitWeight {
  ir::ValueId weight = ir::kNoId;
  int dim = 0;
  int groups = 1;
};

struct TensorRegion {
  // kVocabularyEmbedding: column_ops and row_op are the lookup, and there is no input (token ids);
  // kVocabularyHead: column_ops is the output layer's product, there is no row op, and output is
  // the split logits.
  plan::RegionKind kind = plan::RegionKind::kLayer;
  std::vector<ir::OpId> column_ops;  // ascending
  ir::OpId row_op = ir::kNoId;
  std::vector<ir::OpId> ops;          // every op computing 1/t of its work there, column and row ops included; ascending
  std::vector<SplitWeight> weights;   // ascending by weight id
  ir::ValueId input = ir::kNoId;      // what the column ops read: its gradient is all-reduced in backward
  ir::ValueId output = ir::kNoId;     // the row op's output: all-reduced in forward
  // Every degree t of the region divides it: the gcd of the split dims' sizes (heads, features).
  // A vocabulary region splits any degree up to its size (uneven slices).
  std::int64_t divisor = 1;
  // The ops of the attention core (softmax, masking, dropout and the products around them):
  // what selective recomputation recomputes. Empty in an MLP.
  std::vector<ir::OpId> attention_core;
  // Every value the region splits, with its split dim, ascending: where a rank's stage file cuts
  // a size argument (a reshape into heads, a split of a fused QKV) to its share.
  std::vector<std::pair<ir::ValueId, int>> split_values;

  bool is_vocabulary() const { return kind != plan::RegionKind::kLayer; }
  bool allows(int degree) const {
    return degree >= 1 && (is_vocabulary() ? degree <= divisor : divisor % degree == 0);
  }
  // The op that places the region in a stage: the row op, or the head's product.
  ir::OpId anchor() const { return row_op != ir::kNoId ? row_op : column_ops.back(); }
};

// A column op whose split could not reach a row op, and why ("the split reaches a layer norm
// over the split dim at op 512").
struct RejectedRegion {
  std::vector<ir::OpId> column_ops;
  std::string reason;
};

struct TensorRegions {
  std::vector<TensorRegion> regions;   // ascending by anchor()
  std::vector<RejectedRegion> rejected;
  // [op]: the region an op belongs to, -1 for a replicated op.
  std::vector<int> region_of_op;
  // Sequence parallelism (Korthikanti et al., 2022), on with every degree t > 1 as Megatron-LM
  // runs it (the planner clears them for --sequence-parallel off): the ops outside the regions that work on each position of the sequence alone (layer
  // and RMS norms, residual adds, biases, dropout, activations on [batch, sequence, ...] tensors)
  // run on 1/t of the sequence on each device of the group, and each region's all-reduce becomes
  // a reduce-scatter and an all-gather of as many bytes. Ascending; empty without regions.
  std::vector<ir::OpId> sequence_ops;
  // How the stack keeps a column op's input that sequence parallelism gathers: rannc-run keeps
  // it gathered for backward (false); Megatron-LM keeps each device's part and gathers it again in
  // backward, beside the product of the input's gradient, which hides it (true: the planner's
  // choice for a stack with fused kernels, which rannc-run does not run).
  bool regather_inputs = false;

  // Whether tensor parallelism of this degree is a choice: some layer region splits that many
  // ways (a vocabulary alone is never worth a group).
  bool allows_degree(int degree) const;
  // Appends a region, marking its ops as belonging to it in region_of_op.
  void add(TensorRegion region);
};

// Finds the regions of a graph whose shapes are known (values without shapes end a split).
// Deterministic: the same graph gives the same regions. Vocabulary regions are found only in a
// model with layer regions.
TensorRegions find_tensor_regions(const ir::Graph& graph);

// The keys and values an attention core reads: the second operand of its first product (the
// scores) and of its last (the product with V), or a fused attention op's second and third;
// empty when the core has neither.
std::vector<ir::ValueId> key_value_operands(const ir::Graph& graph, const std::vector<ir::OpId>& core);
// The data-movement ops (views, transposes, grouped-query attention's repeat of the key/value
// heads) that make an attention operand from one tensor, nearest first, each with one output read
// only by the next and no smaller than its source (a split or slice of a fused QKV ends the
// chain): what a fused attention kernel does without (it reads grouped keys and values as they
// are), and the tensor a context group's ring passes (partitioner/context_parallel.h).
struct DataMovement {
  std::vector<ir::OpId> ops;
  ir::ValueId source = ir::kNoId;  // what the last of them reads; the operand itself when none
};
DataMovement movement_before(const ir::Graph& graph, ir::ValueId operand);

// The attention kernels a training stack with fused attention runs (cost::FusedKernel): each
// region's attention core with its products and the data movement before its keys and values
// (movement_before), and each fused attention op outside them. An attention core is known only
// inside a region (a layer whose heads no degree splits is not fused); ascending by first op.
std::vector<cost::FusedKernel> attention_kernels(const ir::Graph& graph, const TensorRegions& regions);

// Every kernel a training stack runs fused (plan/options.h's Fusion): the attention kernels with
// `attention` fused, the elementwise kernels outside them (cost::elementwise_kernels) with
// `elementwise` fused. Ascending by first op.
std::vector<cost::FusedKernel> fused_kernels(const ir::Graph& graph, const TensorRegions& regions, plan::Fusion attention,
                                             plan::Fusion elementwise);

// Adds the vocabulary regions of a language model to the layer regions found
// (vocabulary_regions.cpp): the token embeddings, and the output layer making the model's first
// output, whose candidate `regions.rejected` holds; a classifier narrower than its input stays
// rejected, with that reason.
void add_vocabulary_regions(const ir::Graph& graph, TensorRegions& regions);

}  // namespace rannc::partition
