// The collectives of a Megatron-style tensor-parallel group as TorchScript operators
// (torch.ops.rannc.tp_*), each differentiable, in a library of their own (librannc_tensor_parallel.so):
// the plugin names them in the stage files it writes and checks, rannc-run runs them. Loading the
// library registers the operators; it knows the group only through the abstract Group below, so
// that it needs no c10d (runtime/tensor_parallel_group.h gives c10d's).
#pragma once

#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "plan/tensor_collectives.h"

namespace torch::jit {
struct Resolver;
}  // namespace torch::jit

namespace rannc::tp {

// The operators' names (tp::kCopy, ...) are plan/tensor_collectives.h's.

// For TorchScript source compiled with Module::define or CompilationUnit::define, whose default
// resolver knows only aten's operators (torch.<op>): this one knows those and torch.ops.<namespace>.<op>,
// torch.ops.rannc.tp_copy among them, and ops.<namespace>.<op> as the code of saved modules spells it.
std::shared_ptr<torch::jit::Resolver> script_resolver();

// The collectives of the tensor-parallel group a rank belongs to. Every rank of the group calls
// each one, in the same order.
class Group {
 public:
  virtual ~Group() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void all_reduce_sum(at::Tensor& tensor) = 0;  // in place
  virtual void all_reduce_max(at::Tensor& tensor) = 0;  // in place
  // size() equal chunks, each rank's tensor, concatenated along dim in rank order.
  virtual at::Tensor all_gather(const at::Tensor& tensor, std::int64_t dim) = 0;
  // The sum over the ranks of their tensors, cut into size() equal chunks along dim: this rank's chunk.
  virtual at::Tensor reduce_scatter(const at::Tensor& tensor, std::int64_t dim) = 0;
};

// The process's group: rannc-run sets it once, before any stage runs.
void set_process_group(std::shared_ptr<Group> group);
// A group for the calling thread only, ahead of the process's (nullptr clears it): tests run the
// ranks of a group as threads of one process. CPU autograd runs backward on the thread that
// calls it, so a thread's backward finds the thread's group too.
void set_thread_group(std::shared_ptr<Group> group);
// The thread's group, else the process's; throws std::runtime_error when neither is set.
Group& current_group();

// Megatron-LM's cross entropy for an output layer split along the vocabulary: rank r holds the
// logits of classes [vocab_begin, vocab_begin + slice). Returns the sum over rows of
// -log softmax(full logits)[target], the same value on every rank of the group, computed from
// this rank's slice: the maxima and the sums of exponentials are reduced over the group, and each
// target's logit comes from the rank that holds it. logits: [N, slice]; target: [N] int64 of
// full-vocabulary class ids, each held by exactly one rank (there is no ignore index).
// Differentiable in logits: the gradient is the full cross entropy's restricted to the slice,
// (softmax - one_hot) * grad, with no factor of the group's size. bf16 and half logits are
// computed, and the loss returned, in float32; other dtypes in their own.
at::Tensor vocab_parallel_cross_entropy_sum(const at::Tensor& logits, const at::Tensor& target,
                                            std::int64_t vocab_begin);

}  // namespace rannc::tp
