#include "cost_model/memory.h"

#include <algorithm>
#include <map>
#include <string>

#include "cost_model/op_work.h"
#include "support/error.h"

namespace rannc::cost {
namespace {

bool unpacks_list(const ir::Op& op) { return ir::has_op_trait(op.kind, ir::op_trait::kUnpacksList); }

// The value whose storage a view's output shares: follow views (and the lists that split and
// chunk return) back to their first input, so a kept chunk keeps its whole base.
ir::ValueId storage_owner(const ir::Graph& graph, ir::ValueId id) {
  for (;;) {
    const auto& value = graph.value(id);
    if (value.producer == ir::kNoId) return id;
    const auto& producer = graph.op(value.producer);
    if (!(is_view(producer) || unpacks_list(producer)) || producer.inputs.empty()) return id;
    id = producer.inputs.front();
  }
}

// The tensors a value stands for: itself, or the elements of a list built by prim::ListConstruct
// (op_trait::kPacksList).
std::vector<ir::ValueId> tensors_behind(const ir::Graph& graph, ir::ValueId id) {
  const auto& value = graph.value(id);
  if (value.is_tensor()) return {id};
  if (value.producer == ir::kNoId || !ir::has_op_trait(graph.op(value.producer).kind, ir::op_trait::kPacksList)) return {};
  return graph.op(value.producer).inputs;
}

bool needs_backward(const ir::Op& op, const std::vector<bool>& requires_grad) {
  return std::any_of(op.inputs.begin(), op.inputs.end(),
                     [&](ir::ValueId id) { return requires_grad[static_cast<std::size_t>(id)]; });
}

// The inputs autograd keeps for a product or quotient's backward (op_trait::kSavesForOtherOperand):
// x for the gradient of y in x * y, and y for that of x (and of y itself in x / y). A constant
// such as ONNX's scores / sqrt(d) then keeps nothing batch-sized, as torch 1.13's
// saved_tensors_hooks show.
std::vector<ir::ValueId> saved_operands(const ir::Op& op, const std::vector<bool>& requires_grad) {
  auto needs_grad = [&](std::size_t i) { return requires_grad[static_cast<std::size_t>(op.inputs[i])]; };
  std::vector<ir::ValueId> saved;
  if (needs_grad(1)) saved.push_back(op.inputs[0]);
  if (needs_grad(0) || needs_grad(1)) saved.push_back(op.inputs[1]);
  return saved;
}

// Values autograd keeps for the backward of `op`: batch-dependent tensors, as weights are
// counted with the model state.
std::vector<ir::ValueId> saved_values(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad) {
  std::vector<ir::ValueId> saved;
  auto keep = [&](ir::ValueId candidate) {
    for (auto id : tensors_behind(graph, candidate)) {
      const auto& value = graph.value(id);
      if (value.is_tensor() && value.batch_dependent) saved.push_back(storage_owner(graph, id));
    }
  };
  // masked_fill and where keep their bool condition (one mask read by every layer is kept once).
  if (ir::has_op_trait(op.kind, ir::op_trait::kSavesCondition))
    for (auto id : op.inputs)
      if (graph.value(id).is_tensor() && graph.value(id).type.dtype == ir::DType::kBool) keep(id);
  auto saved_kind = saved_for_backward(graph, op);
  if (saved_kind == SavedForBackward::kNothing) return saved;
  std::vector<ir::ValueId> candidates = saved_kind == SavedForBackward::kInputs ? op.inputs : op.outputs;
  if (saved_kind == SavedForBackward::kInputs && op.inputs.size() == 2 && ir::has_op_trait(op.kind, ir::op_trait::kSavesForOtherOperand))
    candidates = saved_operands(op, requires_grad);
  for (auto candidate : candidates) keep(candidate);
  return saved;
}

// While an op runs backward: the gradients of its outputs and of its activation inputs, and the
// fresh gradient of each weight before it is added into .grad. (A weight several ops of a stage
// read is counted by the stage: StageFootprint::tied_grad_bytes.)
struct OpWorkspace {
  double activation_grads = 0, weight_grads = 0;
};

// A value inside a fused kernel (`internal`) has no gradient tensor of its own.
OpWorkspace op_workspace(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad,
                         const std::vector<bool>& internal, plan::Precision precision) {
  OpWorkspace workspace;
  for (auto id : op.outputs)
    if (!internal[static_cast<std::size_t>(id)]) workspace.activation_grads += stored_bytes(graph.value(id), precision);
  for (auto id : op.inputs) {
    const auto& value = graph.value(id);
    if (!requires_grad[static_cast<std::size_t>(id)] || !value.is_tensor() || internal[static_cast<std::size_t>(id)]) continue;
    if (value.batch_dependent) {
      workspace.activation_grads += stored_bytes(value, precision);
    } else if (value.role == ir::ValueRole::kParam) {
      double weight_grad = static_cast<double>(value.type.bytes());
      workspace.weight_grads += weight_grad;
      // A convolution's backward also holds the kernel library's own copy of the weight (oneDNN
      // reorders it into its blocked layout; measured on the ResNet-50 stages).
      if (classify(graph, op) == OpClass::kConv) workspace.weight_grads += weight_grad;
    }
  }
  return workspace;
}

}  // namespace

double stored_bytes(const ir::Value& value, plan::Precision precision) {
  if (!value.is_tensor()) return 0;
  double bytes = static_cast<double>(value.type.bytes());
  return ir::is_floating_point(value.type.dtype) ? bytes * activation_byte_scale(precision) : bytes;
}

double optimizer_state_bytes(plan::Optimizer optimizer) {
  return optimizer == plan::Optimizer::kAdam ? 8 : optimizer == plan::Optimizer::kMomentum ? 4 : 0;
}

namespace {

const double kBucketBytes = static_cast<double>(plan::kGradientBucketBytes);

// Adam's step makes two temporaries the size of the fp32 tensor it steps (the square root of the
// second moment, then its quotient); SGD and momentum step in place. The tensors stepped are the
// weights, or with sharded state the chunks of the buckets.
double optimizer_step_bytes(const StageFootprint& footprint, const StateLayout& state, plan::Optimizer optimizer) {
  if (optimizer != plan::Optimizer::kAdam) return 0;
  double largest = footprint.largest_param_elements;
  if (state.sharded()) largest = std::max(largest, std::min(kBucketBytes / kGradientElementBytes, footprint.param_elements) / state.replicas + 1);
  return 2 * 4 * largest;
}

// What summing the gradients over the replicas allocates: the allreduce's one flat copy of every
// gradient (of the weights shared with other stages alone, without replicas), or the
// reduce-scatter's bucket copy and the all-gather's bucket of sharded state (one bucket in flight
// at a time). Freed before the optimizer steps.
double gradient_sum_bytes(const StageFootprint& footprint, const StateLayout& state) {
  double grad_bytes = footprint.param_elements * kGradientElementBytes;
  if (state.sharded()) return 2 * std::min(kBucketBytes, grad_bytes);
  return state.replicas > 1 ? grad_bytes : footprint.shared_param_elements * kGradientElementBytes;
}

// The loss reads the stage's model outputs in fp32 (autocast computes it in fp32 under mixed
// precision): it keeps its log-probabilities for backward, and its backward makes their gradient
// and the outputs' gradient.
double loss_kept_bytes(const StageFootprint& footprint, plan::Precision precision) {
  return footprint.final_output_bytes / activation_byte_scale(precision);
}

}  // namespace

double host_memory_bytes(double param_elements, plan::Optimizer optimizer, const StateLayout& layout) {
  if (!layout.offload) return 0;
  const double master = 4;
  return param_elements * (master + kGradientElementBytes + optimizer_state_bytes(optimizer) +
                           (layout.replicas > 1 ? kGradientElementBytes : 0));
}

double working_weight_bytes(plan::Precision precision) { return precision == plan::Precision::kFp32 ? 4 : 2; }

ParamStateBytes param_state_bytes(plan::Optimizer optimizer, plan::Precision precision, const StateLayout& layout) {
  ParamStateBytes bytes;
  bytes.grads = kGradientElementBytes;
  if (layout.offload) {
    // The working copy and the step's gradients; the rest is on the host.
    bytes.weights = working_weight_bytes(precision);
    return bytes;
  }
  const double shard = layout.sharded() ? 1.0 / layout.replicas : 1.0;
  const double master = 4;
  // Sharded: the gradient of this replica's shard of the master weights, which the reduce-scatter fills.
  if (layout.sharded()) bytes.grads += kGradientElementBytes * shard;
  // In fp32 the working weights are the master, unless a shard of the master is kept beside them.
  if (precision == plan::Precision::kFp32 && !layout.sharded()) bytes.weights = master;
  else bytes.weights = working_weight_bytes(precision) + master * shard;
  bytes.optimizer = optimizer_state_bytes(optimizer) * shard;
  return bytes;
}

ActivationMemory activation_memory(const ir::Graph& graph, const std::vector<bool>& requires_grad, plan::Precision precision,
                                   const std::vector<FusedKernel>& fused) {
  ActivationMemory memory;
  memory.kept_bytes.assign(graph.ops().size(), 0);
  memory.fixed_kept_bytes.assign(graph.ops().size(), 0);
  memory.workspace_bytes.assign(graph.ops().size(), 0);
  memory.weight_grad_bytes.assign(graph.ops().size(), 0);
  const std::vector<bool> internal = kernel_internal_values(graph, fused);
  std::vector<int> kernel_of(graph.ops().size(), -1);
  std::vector<bool> attention(fused.size());
  std::vector<ir::ValueId> recomputed;  // inside a kernel, saved by an op of it: computed again in backward
  for (std::size_t k = 0; k < fused.size(); ++k) {
    attention[k] = is_attention_kernel(graph, fused[k]);
    for (auto op : fused[k]) kernel_of[static_cast<std::size_t>(op)] = static_cast<int>(k);
  }
  std::vector<bool> kept(graph.values().size(), false);
  for (const auto& op : graph.ops()) {
    OpWorkspace workspace = op_workspace(graph, op, requires_grad, internal, precision);
    memory.workspace_bytes[static_cast<std::size_t>(op.id)] = workspace.activation_grads + workspace.weight_grads;
    memory.weight_grad_bytes[static_cast<std::size_t>(op.id)] = workspace.weight_grads;
    if (!needs_backward(op, requires_grad)) continue;
    int kernel = kernel_of[static_cast<std::size_t>(op.id)];
    // An attention kernel draws its dropout again from the generator's state and keeps no scores.
    if (kernel < 0 || !attention[static_cast<std::size_t>(kernel)])
      memory.kept_bytes[static_cast<std::size_t>(op.id)] += extra_saved_bytes(graph, op);
    for (auto id : saved_values(graph, op, requires_grad)) {
      if (internal[static_cast<std::size_t>(id)]) recomputed.push_back(id);
      else kept[static_cast<std::size_t>(id)] = true;
    }
  }
  // A kernel computes again in backward what it would have kept, from the tensors at its boundary
  // those are made of: its activation inputs, or its outputs that later ops read (a norm's input
  // where the residual add before it is in the kernel). Those are kept.
  std::vector<bool> visited(graph.values().size(), false);
  while (!recomputed.empty()) {
    const ir::ValueId id = recomputed.back();
    recomputed.pop_back();
    if (visited[static_cast<std::size_t>(id)]) continue;
    visited[static_cast<std::size_t>(id)] = true;
    for (auto in : graph.op(graph.value(id).producer).inputs) {
      if (internal[static_cast<std::size_t>(in)]) {
        recomputed.push_back(in);
        continue;
      }
      for (auto behind : tensors_behind(graph, in)) {
        const auto& value = graph.value(behind);
        if (value.is_tensor() && value.batch_dependent) kept[static_cast<std::size_t>(storage_owner(graph, behind))] = true;
      }
    }
  }
  for (const auto& value : graph.values()) {
    // Model inputs are kept by the stage that receives them (StageFootprint::input_bytes).
    if (!kept[static_cast<std::size_t>(value.id)] || value.producer == ir::kNoId) continue;
    // A tensor without a batch dim (a causal mask cut to the sequence, rotary tables) is made
    // again by every microbatch's forward, at its one size.
    auto& kept_bytes = value.type.batch_dim >= 0 ? memory.kept_bytes : memory.fixed_kept_bytes;
    kept_bytes[static_cast<std::size_t>(value.producer)] += stored_bytes(value, precision);
  }
  for (const auto& kernel : fused)
    if (!kernel.empty()) memory.kept_bytes[static_cast<std::size_t>(kernel.back())] += kernel_saved_bytes(graph, internal, kernel);
  memory.saved = std::move(kept);
  return memory;
}

StageFootprint whole_model_footprint(const ir::Graph& graph, const ActivationMemory& activations, plan::Precision precision) {
  StageFootprint footprint;
  for (auto id : graph.values_with_role(ir::ValueRole::kParam)) {
    footprint.param_elements += static_cast<double>(graph.value(id).type.numel());
    footprint.largest_param_elements =
        std::max(footprint.largest_param_elements, static_cast<double>(graph.value(id).type.numel()));
  }
  for (auto id : graph.values_with_role(ir::ValueRole::kBuffer)) {
    footprint.buffer_bytes += static_cast<double>(graph.value(id).type.bytes());
  }
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) {
    footprint.input_bytes += stored_bytes(graph.value(id), precision);
  }
  for (auto id : graph.model_outputs()) footprint.final_output_bytes += stored_bytes(graph.value(id), precision);
  for (std::size_t i = 0; i < activations.kept_bytes.size(); ++i) {
    footprint.kept_bytes += activations.kept_bytes[i] + activations.fixed_kept_bytes[i];
    footprint.workspace_bytes = std::max(footprint.workspace_bytes, activations.workspace_bytes[i]);
  }
  std::vector<ir::OpId> ops;
  for (const auto& op : graph.ops()) ops.push_back(op.id);
  footprint.tied_grad_bytes = largest_tied_grad_bytes(graph, ops);
  return footprint;
}

double largest_tied_grad_bytes(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  std::map<ir::ValueId, int> reads;  // by how many of the ops
  double largest = 0;
  for (auto id : ops) {
    auto inputs = graph.op(id).inputs;
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    for (auto input : inputs) {
      const auto& value = graph.value(input);
      if (value.role == ir::ValueRole::kParam && ++reads[input] == 2)
        largest = std::max(largest, static_cast<double>(value.type.bytes()));
    }
  }
  return largest;
}

int microbatches_in_flight(const StagePlacement& placement) {
  return plan::microbatches_in_flight(placement.schedule, placement.stages - placement.stage_index - 1, placement.microbatches);
}

plan::MemoryBreakdown stage_memory(const StageFootprint& footprint, const StagePlacement& placement, plan::Optimizer optimizer,
                             plan::Precision precision) {
  return stage_memory(footprint, microbatches_in_flight(placement), placement.recompute, placement.state, optimizer,
                      precision);
}

plan::MemoryBreakdown stage_memory(const StageFootprint& footprint, int in_flight, plan::Recompute recompute, const StateLayout& state,
                             plan::Optimizer optimizer, plan::Precision precision) {
  // The shared weights' state is split over the copies of every stage holding them.
  StateLayout shared_state = state;
  shared_state.replicas = std::max(state.replicas, state.shared_replicas);
  const ParamStateBytes own = param_state_bytes(optimizer, precision, state);
  const ParamStateBytes shared = param_state_bytes(optimizer, precision, shared_state);
  const double own_elements = footprint.param_elements - footprint.shared_param_elements;
  auto state_bytes = [&](double ParamStateBytes::*part) {
    return own_elements * own.*part + footprint.shared_param_elements * shared.*part;
  };
  plan::MemoryBreakdown memory;
  memory.weights = state_bytes(&ParamStateBytes::weights) + footprint.buffer_bytes;
  memory.grads = state_bytes(&ParamStateBytes::grads);
  memory.optimizer = state_bytes(&ParamStateBytes::optimizer);
  memory.activations = in_flight * footprint.input_bytes;
  // Each microbatch's model outputs and what the loss keeps of them, until its backward.
  const double loss_bytes = footprint.final_output_bytes + loss_kept_bytes(footprint, precision);
  switch (recompute) {
    case plan::Recompute::kNone:
      memory.activations += in_flight * (footprint.kept_bytes + footprint.held_output_bytes + loss_bytes);
      break;
    case plan::Recompute::kSelective:
      memory.activations += in_flight * (footprint.kept_bytes - footprint.core_kept_bytes + footprint.held_output_bytes + loss_bytes) +
                            footprint.largest_core_bytes;
      break;
    case plan::Recompute::kFull:
      // The microbatch computed again: what it keeps, and its outputs until their gradients come.
      memory.activations += footprint.kept_bytes + footprint.held_output_bytes + loss_bytes;
      break;
  }
  memory.workspace = std::max(footprint.workspace_bytes + footprint.tied_grad_bytes, 2 * loss_kept_bytes(footprint, precision));
  // Double-buffered sends and receives of one microbatch, and the next pass's receive, which
  // starts before this pass computes so that its transfer overlaps the computation.
  memory.comm_buffers = 2 * (footprint.input_bytes + footprint.output_bytes) + footprint.pass_receive_bytes;
  // The stage's inputs stay while it steps: the data rows of the step, the embedding exchange's
  // pooled rows.
  memory.step_buffers = std::max(gradient_sum_bytes(footprint, state), optimizer_step_bytes(footprint, state, optimizer)) +
                        footprint.input_bytes;
  return memory;
}

plan::MemoryBreakdown chunks_memory(const std::vector<plan::MemoryBreakdown>& chunks) {
  plan::MemoryBreakdown memory;
  for (const auto& chunk : chunks) {
    memory.weights += chunk.weights;
    memory.grads += chunk.grads;
    memory.optimizer += chunk.optimizer;
    memory.activations += chunk.activations;
    memory.comm_buffers += chunk.comm_buffers;
    memory.workspace = std::max(memory.workspace, chunk.workspace);
    // One step sums every chunk's gradients: their flat copies are alive together.
    memory.step_buffers += chunk.step_buffers;
  }
  return memory;
}

}  // namespace rannc::cost
