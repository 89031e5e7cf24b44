// Memory per device: model state (weights, gradients, optimizer state), activations kept for
// backward times the microbatches in flight, the largest transient of one op, and
// communication buffers. Every term is an upper estimate: a plan must never run out.
#pragma once

#include <string_view>
#include <vector>

#include "cost_model/roofline.h"
#include "ir/graph.h"
#include "plan/plan.h"

namespace rannc::cost {

// How the copies of a stage hold its training state: R replicas of the stage (in all pipelines),
// and whether they split the optimizer state among them (plan/options.h).
// Offloaded: the master weights, their gradients and the optimizer state live in host memory;
// the device holds a working copy of the weights and the step's gradients, sent to the host after
// the last backward (see offload_seconds in comm.h).
struct StateLayout {
  int replicas = 1;
  plan::StateSharding sharding = plan::StateSharding::kNone;
  bool offload = false;
  // The copies that split the state of the weights shared with other stages when sharded: every
  // holding stage's replicas (0: `replicas`, the least it can be).
  int shared_replicas = 0;
  bool sharded() const { return replicas > 1 && sharding != plan::StateSharding::kNone; }
};

// Bytes per parameter element. fp32: weights 4, gradients 4. Mixed precision: a 16-bit copy
// of the weights beside the fp32 master (2 + 4), gradients accumulated in fp32 (4). Optimizer
// state in fp32: momentum 4, Adam 8 (two moments), SGD none. Sharded state: each replica keeps
// 1/R of the optimizer state and of the fp32 master weights, beside its full working copy of
// the weights (16-bit, or fp32 when training in fp32) and its full gradients, plus the gradient
// of its shard of the master (what the reduce-scatter fills).
struct ParamStateBytes {
  double weights = 0, grads = 0, optimizer = 0;
  double total() const { return weights + grads + optimizer; }
};
ParamStateBytes param_state_bytes(plan::Optimizer optimizer, plan::Precision precision, const StateLayout& layout = {});
// Gradients are accumulated in fp32; the working copy of the weights the passes read is 16-bit
// under mixed precision (what sharded state all-gathers and offload copies to the device).
inline constexpr double kGradientElementBytes = 4;
double working_weight_bytes(plan::Precision precision);
// fp32 optimizer state per parameter element: momentum 4, Adam 8, SGD none.
double optimizer_state_bytes(plan::Optimizer optimizer);
// Host memory an offloaded stage takes per rank (0 when not offloaded): fp32 master weights,
// fp32 gradients and the optimizer state, plus the flat copy of the gradients the allreduce sums
// when replicated.
double host_memory_bytes(double param_elements, plan::Optimizer optimizer, const StateLayout& layout);

// Bytes of a tensor as stored during training: floating activations in 16 bits under mixed
// precision; 0 for non-tensors.
double stored_bytes(const ir::Value& value, plan::Precision precision);

// Activation memory by op at the batch the graph was evaluated at.
struct ActivationMemory {
  // Bytes kept from forward to backward, charged to the op that allocated them: its outputs
  // that a consumer saves for backward (a view's consumers keep the viewed tensor alive), plus
  // its own saved extras (dropout masks, pooling indices).
  std::vector<double> kept_bytes;
  // Kept bytes that do not scale with the batch: tensors without a batch dim that each
  // microbatch's forward makes (a causal mask cut to the sequence, rotary tables).
  std::vector<double> fixed_kept_bytes;
  // Bytes alive only while the op runs: the gradients of its outputs and of its activation inputs,
  // and the fresh gradients of the weights it reads.
  std::vector<double> workspace_bytes;
  // The part of workspace_bytes that does not scale with the batch: the fresh weight gradients.
  std::vector<double> weight_grad_bytes;
  // Per value: whether it is kept for backward (its bytes are in its producer's kept_bytes).
  std::vector<bool> saved;
};
// The ops of `fused` run as kernels (CostModel::fused_kernels): the values inside a kernel are
// neither kept nor given gradients; a kernel that kept one keeps its activation inputs instead, to
// compute it again in backward; an attention kernel keeps its log-sum-exp and no dropout mask.
ActivationMemory activation_memory(const ir::Graph& graph, const std::vector<bool>& requires_grad, plan::Precision precision,
                                   const std::vector<FusedKernel>& fused = {});

// What the memory model needs of a stage, for one microbatch.
struct StageFootprint {
  double param_elements = 0;
  double largest_param_elements = 0;  // of one weight: the optimizer steps weight by weight
  double buffer_bytes = 0;     // non-trainable tensors (BatchNorm statistics), kept as they are
  double kept_bytes = 0;       // sum of ActivationMemory::kept_bytes over the stage's ops
  // Of kept_bytes, what the attention cores keep that selective recomputation does not, and
  // the most of one core (alive while it is recomputed).
  double core_kept_bytes = 0, largest_core_bytes = 0;
  double input_bytes = 0;      // tensors the stage receives (model inputs or earlier stages' outputs)
  double output_bytes = 0;     // tensors the stage sends to later stages
  // The model outputs the stage makes, which the loss reads where they are (never sent): held
  // from forward to backward like the outputs sent, beside what the loss keeps of them.
  double final_output_bytes = 0;
  // Outputs sent to later stages that no op keeps for backward: rannc-run holds each
  // microbatch's until its backward (they are the roots autograd starts from); under full
  // recomputation only the recomputed microbatch's. (Those an op keeps are in kept_bytes already.)
  double held_output_bytes = 0;
  // The most one pass receives from other stages: the inputs they compute, or the gradients of
  // what it sends them. rannc-run starts that receive before the pass ahead of it computes.
  double pass_receive_bytes = 0;
  double workspace_bytes = 0;  // max of ActivationMemory::workspace_bytes over the stage's ops
  // The largest gradient of a weight that several ops of the stage read (tied embeddings): in
  // backward the first waits in autograd's buffer for the others. A tie split over stages is two
  // weights, each with one gradient.
  double tied_grad_bytes = 0;
  // Of param_elements, those of the weights the stage shares with other stages (a tied embedding
  // and output layer): the step sums their gradients between the stages from a flat copy, as it
  // sums replicas', and sharded state splits them over every stage's copies.
  double shared_param_elements = 0;
};

// The largest gradient of a weight that two or more of `ops` read.
double largest_tied_grad_bytes(const ir::Graph& graph, const std::vector<ir::OpId>& ops);

// The whole model as one stage at the evaluated batch.
StageFootprint whole_model_footprint(const ir::Graph& graph, const ActivationMemory& activations, plan::Precision precision);

struct StagePlacement {
  plan::Schedule schedule = plan::Schedule::k1F1B;
  int stages = 1;
  int stage_index = 0;
  int microbatches = 1;
  StateLayout state;
  plan::Recompute recompute = plan::Recompute::kNone;
};

// The schedule's bound (plan/schedule.h) for this stage.
int microbatches_in_flight(const StagePlacement& placement);

// Full recomputation keeps only the stage inputs of each microbatch in flight, and the
// activations of the one microbatch being recomputed; selective recomputation keeps everything
// but the attention cores, and one core while it is recomputed. Communication: double-buffered
// sends and receives of one microbatch, plus the next pass's receive (started early to overlap).
// The step's buffers, after the passes' are freed: when replicated, the flat copy of the gradients
// the allreduce sums, or with sharded state two buckets of the reduce-scatter and all-gather; then
// the optimizer's temporaries (Adam: two of the largest tensor it steps).
plan::MemoryBreakdown stage_memory(const StageFootprint& footprint, const StagePlacement& placement, plan::Optimizer optimizer,
                             plan::Precision precision);
// The same with the microbatches in flight given directly (the partitioner's form).
plan::MemoryBreakdown stage_memory(const StageFootprint& footprint, int in_flight, plan::Recompute recompute, const StateLayout& state,
                             plan::Optimizer optimizer, plan::Precision precision);

// The memory of a device holding several model chunks (interleaved 1F1B), from each chunk's own
// stage_memory at its microbatches in flight: state, activations and communication buffers add
// up, and so do the step's buffers (one step sums every chunk's gradients); the workspace of one
// pass at a time is the largest chunk's.
plan::MemoryBreakdown chunks_memory(const std::vector<plan::MemoryBreakdown>& chunks);

}  // namespace rannc::cost
