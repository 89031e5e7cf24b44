// What the stage search knows of a sequence of blocks: the time and memory of each block at
// every per-replica microbatch size it may run at, and the weights and tensors that tie blocks
// together. Built from a model by block_costs(); tests fill it directly.
#pragma once

#include <algorithm>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/memory.h"
#include "partitioner/coarsen.h"
#include "partitioner/context_parallel.h"
#include "partitioner/tensor_regions.h"

namespace rannc::partition {

struct BlockCosts {
  double evaluated_batch = 1;     // the batch the byte counts below are at
  std::vector<int> samples;       // per-replica microbatch sizes costed, ascending
  // [block][index into samples]: the device's time of each pass, and the workspace
  std::vector<std::vector<double>> fwd_ms, bwd_ms, workspace_bytes;
  // [block][index into samples]: the host's time to issue each pass where the profile measured it
  // apart (cost::OpCost); a stage's pass takes the longer of the two sums (cost::PassTime). Empty
  // when no block has one.
  std::vector<std::vector<double>> fwd_host_ms, bwd_host_ms;
  std::vector<double> kept_bytes;  // [block] activations kept for backward, at evaluated_batch
  // [block] kept bytes that do not scale with the batch (ActivationMemory::fixed_kept_bytes),
  // whole on every tensor rank. Empty in tests: none.
  std::vector<double> fixed_kept_bytes;

  // What selective recomputation (plan::Recompute::kSelective) does in each block: the attention
  // cores' ops whose outputs stay inside their core (TensorRegion::attention_core, less the
  // product with V, whose output the output projection keeps) run again in backward, and their
  // activations are not kept. Tests that fill BlockCosts may leave the tables empty: no cores.
  struct Cores {
    std::vector<std::vector<double>> fwd_ms;  // [block][sample]: their forward, run again
    std::vector<double> kept_bytes;           // [block]: their kept activations, at evaluated_batch
    // [block]: the most one core keeps: alive while that core is recomputed in backward.
    std::vector<double> largest_bytes;
  };
  Cores cores;
  // [block + 1]: whether an attention core (the whole TensorRegion::attention_core, the product
  // with V included, as a stage file's core_<k> method runs it) has ops both before the block and
  // in it. A selective stage does not start or end there: rannc-run recomputes only the cores a
  // stage holds whole. Empty in tests without cores.
  std::vector<bool> cuts_core_before;
  bool cuts_core(int block) const {
    return !cuts_core_before.empty() && cuts_core_before[static_cast<std::size_t>(block)];
  }

  // The blocks on a group of devices that splits each replica's work: tensor parallelism of one
  // degree t (partitioner/tensor_regions.h), whose regions that allow t do 1/t of their work and
  // keep 1/t of their activations while the others run whole on every device of the group, and
  // context parallelism of degree c (partitioner/context_parallel.h), each device running every
  // op on 1/c of each sample's positions. t > 1 or c > 1.
  struct Split {
    int degree = 2;
    int context = 1;
    // The times and workspace are per device at the group's samples (each a sample's 1/c); the
    // kept bytes are per device of the tensor split alone (the search scales them by the
    // device's share of the samples, context split included).
    std::vector<std::vector<double>> fwd_ms, bwd_ms, workspace_bytes;  // [block][sample], as above
    std::vector<double> kept_bytes;                                    // [block]
    Cores cores;                                                       // per device of the group
    // [block]: what the group all-reduces per pass at evaluated_batch, and in how many
    // collectives: each region's output in forward (where its row op is), its input's gradient
    // in backward (where its column ops are).
    std::vector<double> fwd_reduced_bytes, bwd_reduced_bytes;
    std::vector<int> fwd_collectives, bwd_collectives;
    // [block]: what each device holds less of the model outputs made there: the output layer's
    // logits stay split by vocabulary, 1/t on each device.
    std::vector<double> final_output_saved_bytes;
    // [block]: the keys and values the attention cores of the block pass around the context
    // group's rings, at evaluated_batch with the whole sequence, and how many cores (rings);
    // empty when context is 1.
    std::vector<double> exchanged_bytes;
    std::vector<int> exchanges;
    // [block]: whether a region split at this degree (or, with context > 1, an attention core)
    // has ops both before the block and in it. No stage of this group starts or ends there: a
    // region runs whole inside one stage.
    std::vector<bool> cuts_region_before;
  };
  // Those of context 1 by ascending degree, then those of each context > 1 by ascending context and
  // degree; empty without split regions.
  std::vector<Split> splits;

  // A parameter or buffer, with the blocks that read it (a stage holds it once however many of
  // its blocks read it; tied weights appear in every stage that reads them).
  struct Weight {
    double param_elements = 0;  // trainable elements (0 for a buffer)
    double buffer_bytes = 0;    // bytes of a non-trainable tensor
    std::vector<int> blocks;    // ascending, without repeats
    std::vector<int> reads;     // the block of each op that reads a trainable weight, ascending
    // Tensor parallelism splits it t ways where t divides this (0: never split), or with
    // split_unevenly any t up to it (a vocabulary's slices, counted as 1/t each).
    std::int64_t split_divisor = 0;
    bool split_unevenly = false;
    // Whether a block in [begin, end) reads it: a stage of those blocks holds it.
    bool read_in(int begin, int end) const {
      auto first = std::lower_bound(blocks.begin(), blocks.end(), begin);
      return first != blocks.end() && *first < end;
    }
    bool splits(int degree) const {
      return split_divisor > 0 && (split_unevenly ? degree <= split_divisor : split_divisor % degree == 0);
    }
  };
  std::vector<Weight> weights;

  // A tensor passed between blocks or from the model's inputs, as stored (bytes at evaluated_batch).
  struct Tensor {
    double bytes = 0;
    int producer = -1;           // block, -1 for a model input
    std::vector<int> consumers;  // blocks, ascending, without repeats, excluding the producer
    bool model_output = false;
    bool batch_free = false;     // no batch dim (a batch-reduced value): replicas cannot split it
    bool saved = false;          // kept for backward: already in its producer block's kept_bytes
  };
  std::vector<Tensor> tensors;

  int count() const { return static_cast<int>(fwd_ms.size()); }
  double fwd_host(int block, int sample) const { return fwd_host_ms.empty() ? 0 : fwd_host_ms[block][sample]; }
  double bwd_host(int block, int sample) const { return bwd_host_ms.empty() ? 0 : bwd_host_ms[block][sample]; }
  // Index of a microbatch size in `samples`; throws std::out_of_range for one not costed.
  int sample_index(int microbatch_samples) const;
  // The split of a group (degree x context > 1), or nullptr when it was not costed or is 1 x 1.
  const Split* split(int degree, int context = 1) const;
};

// Forward + backward time of each unit at the evaluated batch (the coarsening's vertex weights).
std::vector<double> unit_step_ms(const UnitGraph& units, const cost::CostModel& costs);

// Costs every block of `blocking` at each size in `samples` (sorted and deduplicated here), at
// each tensor-parallel degree > 1 in `degrees` that some region of `regions` allows, and where
// `context_split` allows it, at each context degree > 1 in `contexts` with every such degree and 1.
BlockCosts block_costs(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking,
                       const cost::CostModel& costs, const cost::ActivationMemory& activations, std::int64_t evaluated_batch,
                       std::vector<int> samples, const TensorRegions& regions = {}, const std::vector<int>& degrees = {},
                       const ContextSplit& context_split = {}, const std::vector<int>& contexts = {});

// Per-stage sums over a contiguous range of blocks [begin, end), for all ranges at once.
class RangeTable {
 public:
  explicit RangeTable(const BlockCosts& blocks);

  double param_elements(int begin, int end) const { return at(param_elements_, begin, end); }
  // The most elements of one trainable weight the range holds, per device at a tensor-parallel
  // degree (1 or a costed one): what Adam's step makes its temporaries for.
  double largest_param_elements(int begin, int end, int degree = 1) const;
  // The largest gradient of a weight that two or more ops of the range read.
  double largest_tied_grad_bytes(int begin, int end) const { return at(largest_tied_grad_bytes_, begin, end); }
  double buffer_bytes(int begin, int end) const { return at(buffer_bytes_, begin, end); }
  // Tensors received from earlier blocks (sent point-to-point between stages).
  double received_bytes(int begin, int end) const { return at(received_bytes_, begin, end); }
  // Model inputs read by the range (loaded by the stage itself).
  double model_input_bytes(int begin, int end) const { return at(model_input_bytes_, begin, end); }
  // Tensors produced in the range and read after it, or model outputs.
  double sent_bytes(int begin, int end) const { return at(sent_bytes_, begin, end); }
  // The model outputs among them that no later block reads: the loss takes them where they are.
  // Per device at a degree (1 or a costed one): split logits are 1/t each.
  double final_output_bytes(int begin, int end, int degree = 1) const;
  // The elements of the weights the range shares with blocks outside it (a tied embedding and
  // output layer in two stages), per device at a degree: their gradients are summed between the
  // stages each step, and sharded state splits them over every stage's copies.
  double shared_param_elements(int begin, int end, int degree) const;
  // The others that some op keeps for backward (counted in kept_bytes already).
  double saved_sent_bytes(int begin, int end) const { return at(saved_sent_bytes_, begin, end); }
  double kept_bytes(int begin, int end) const { return kept_prefix_[end] - kept_prefix_[begin]; }
  // What each microbatch of the range keeps whatever its size (BlockCosts::fixed_kept_bytes).
  double fixed_kept_bytes(int begin, int end) const { return fixed_kept_prefix_[end] - fixed_kept_prefix_[begin]; }
  // The same under tensor parallelism of a costed degree > 1: per device of its group.
  double param_elements(int begin, int end, int degree) const;
  double kept_bytes(int begin, int end, int degree) const;
  // Selective recomputation (BlockCosts::Cores) per device at a degree (1 or a costed one): the
  // activations the range's cores keep, and the most of one core.
  double core_kept_bytes(int begin, int end, int degree) const;
  double largest_core_bytes(int begin, int end, int degree) const;
  // Whether the range sends a tensor without a batch dim to a later block: each replica would
  // hold a different partial value, so such a range runs on one replica per pipeline.
  bool sends_batch_free(int begin, int end) const { return at(batch_free_sent_, begin, end) > 0; }

 private:
  double at(const std::vector<double>& table, int begin, int end) const { return table[begin * (count_ + 1) + end]; }
  std::size_t split_index(int degree) const;  // into split_degrees_
  std::vector<double> shared_params(const BlockCosts& blocks, int degree) const;
  int count_;
  std::vector<int> split_degrees_;
  // [split]: elements that split at its degree, in full (a table like param_elements_); kept
  // bytes per device, as prefix sums.
  std::vector<std::vector<double>> split_param_elements_, split_kept_prefix_, split_final_output_saved_prefix_;
  // [0: degree 1, 1 + split index]: the tables of shared_param_elements.
  std::vector<std::vector<double>> shared_param_elements_;
  // [0: degree 1, 1 + split index]: BlockCosts::Cores as prefix sums and running maxima tables,
  // and the largest weight per device as running maxima.
  std::vector<std::vector<double>> core_kept_prefix_, largest_core_, largest_param_elements_;
  std::vector<double> largest_tied_grad_bytes_;  // running maxima over end, not sums
  std::vector<double> param_elements_, buffer_bytes_, received_bytes_, model_input_bytes_, sent_bytes_,
      final_output_bytes_, saved_sent_bytes_, batch_free_sent_, kept_prefix_, fixed_kept_prefix_;
};

}  // namespace rannc::partition
