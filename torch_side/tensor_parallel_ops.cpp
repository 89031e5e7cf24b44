#include "torch_side/tensor_parallel_ops.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <torch/library.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace rannc::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::mutex process_group_mutex;
std::shared_ptr<Group> process_group;
thread_local std::shared_ptr<Group> thread_group;

// The size of each rank's chunk of x along dim; `op` names the operator in the error.
std::int64_t chunk_size(const at::Tensor& x, std::int64_t dim, const char* op) {
  const std::int64_t ranks = current_group().size();
  const std::int64_t size = x.size(dim);
  if (size % ranks != 0)
    throw std::runtime_error(c10::str(op, ": dim ", dim, " of a tensor of shape ", x.sizes(), " has size ", size,
                                      ", which the tensor-parallel group's ", ranks,
                                      " ranks do not divide into equal chunks"));
  return size / ranks;
}

// This rank's chunk along dim, in memory of its own: a view would share the whole tensor's
// storage, and autograd refuses in-place changes to views that a custom Function returns.
at::Tensor own_chunk(const at::Tensor& x, std::int64_t dim, const char* op) {
  const std::int64_t chunk = chunk_size(x, dim, op);
  return x.narrow(dim, current_group().rank() * chunk, chunk).clone(at::MemoryFormat::Contiguous);
}

at::Tensor summed(const at::Tensor& x) {
  at::Tensor sum = x.clone(at::MemoryFormat::Contiguous);  // the input stays as it was
  current_group().all_reduce_sum(sum);
  return sum;
}

at::Tensor gathered(const at::Tensor& x, std::int64_t dim) { return current_group().all_gather(x, dim); }

at::Tensor reduce_scattered(const at::Tensor& x, std::int64_t dim, const char* op) {
  chunk_size(x, dim, op);  // the clear error, before any rank starts the collective
  return current_group().reduce_scatter(x, dim);
}

struct Copy : torch::autograd::Function<Copy> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return x; }
  static variable_list backward(AutogradContext*, variable_list grads) { return {summed(grads[0])}; }
};

struct Reduce : torch::autograd::Function<Reduce> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& x) { return summed(x); }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0]}; }
};

using AlongDim = at::Tensor (*)(const at::Tensor&, std::int64_t dim);

// An operator along a dim whose backward is another collective along the same dim.
template <AlongDim Forward, AlongDim Backward>
struct DimPair : torch::autograd::Function<DimPair<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, std::int64_t dim) {
    ctx->saved_data["dim"] = dim;
    return Forward(x, dim);
  }
  // One gradient per forward argument; the dim's is undefined.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Backward(grads[0], ctx->saved_data["dim"].toInt()), at::Tensor()};
  }
};

// The halves that name their operator in the error about an undivided dim (a backward never
// meets one: its gradient has the gathered size).
at::Tensor gather_backward(const at::Tensor& grad, std::int64_t dim) { return reduce_scattered(grad, dim, kGather); }
at::Tensor reduce_scatter_forward(const at::Tensor& x, std::int64_t dim) {
  return reduce_scattered(x, dim, kReduceScatter);
}
at::Tensor split_forward(const at::Tensor& x, std::int64_t dim) { return own_chunk(x, dim, kSplit); }
at::Tensor join_backward(const at::Tensor& grad, std::int64_t dim) { return own_chunk(grad, dim, kJoin); }

using Gather = DimPair<gathered, gather_backward>;
using ReduceScatter = DimPair<reduce_scatter_forward, gathered>;
using Split = DimPair<split_forward, gathered>;
using Join = DimPair<gathered, join_backward>;

// The kernels. Registered for CompositeImplicitAutograd, they run above autograd, for every
// backend: Function::apply records the node whose backward is the pair's other collective,
// whether the caller is C++, the dispatcher or the TorchScript interpreter.
at::Tensor tp_copy(const at::Tensor& x) {
  current_group();  // a stage without its group fails here rather than in backward
  return Copy::apply(x);
}

at::Tensor tp_reduce(const at::Tensor& x) { return Reduce::apply(x); }

template <typename Pair>
at::Tensor along_dim(const at::Tensor& x, std::int64_t dim) {
  return Pair::apply(x, c10::maybe_wrap_dim(dim, x.dim()));
}

// bf16 and half lose too much in sums of exponentials over a vocabulary.
at::ScalarType compute_dtype(at::ScalarType dtype) {
  return dtype == at::kBFloat16 || dtype == at::kHalf ? at::kFloat : dtype;
}

void check_cross_entropy_inputs(const at::Tensor& logits, const at::Tensor& target) {
  if (logits.dim() != 2 || target.dim() != 1 || target.size(0) != logits.size(0) ||
      target.scalar_type() != at::kLong)
    throw std::invalid_argument(c10::str("vocab-parallel cross entropy takes logits [N, classes] and int64 targets ",
                                         "[N], got logits ", logits.sizes(), " and ", target.scalar_type(),
                                         " targets ", target.sizes()));
}

// Each row's target as a column of this rank's slice of `classes` classes (0 where another rank
// holds it), and whether this rank holds it.
std::pair<at::Tensor, at::Tensor> targets_in_slice(const at::Tensor& target, std::int64_t vocab_begin,
                                                   std::int64_t classes) {
  at::Tensor held = (target >= vocab_begin).logical_and(target < vocab_begin + classes);
  return {(target - vocab_begin).masked_fill(held.logical_not(), 0).unsqueeze(1), held};
}

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& target,
                            std::int64_t vocab_begin) {
    auto& group = current_group();
    at::Tensor x = logits.to(compute_dtype(logits.scalar_type()));
    at::Tensor max = std::get<0>(x.max(1));
    group.all_reduce_max(max);
    at::Tensor shifted = x - max.unsqueeze(1);  // exp of this cannot overflow
    auto [column, held] = targets_in_slice(target, vocab_begin, x.size(1));
    at::Tensor target_logit = shifted.gather(1, column).squeeze(1).masked_fill(held.logical_not(), 0);
    // In place, as every later step: the loss holds one fp32 copy of the rank's logits.
    at::Tensor softmax = shifted.exp_();
    // One all-reduce for the three per-row sums: exponentials, the target's logit, its holders.
    at::Tensor sums = at::stack({softmax.sum(1), target_logit, held.to(x.scalar_type())});
    group.all_reduce_sum(sums);
    if (!sums[2].eq(1).all().item<bool>())
      throw std::invalid_argument(
          "vocab-parallel cross entropy: a target is no class of the vocabulary the tensor-parallel group holds");
    softmax.div_(sums[0].unsqueeze(1));
    ctx->save_for_backward({softmax, column, held});
    ctx->saved_data["dtype"] = logits.scalar_type();
    return (sums[0].log() - sums[1]).sum();
  }

  // (softmax - one_hot) restricted to the slice: the one is on the rank holding the target. Made
  // in one new tensor (no one-hot matrix), since the logits are the largest tensor of a language model.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& softmax = saved[0];
    at::Tensor grad = softmax * grads[0];
    grad.scatter_add_(1, saved[1], (saved[2].to(softmax.dtype()) * -grads[0]).unsqueeze(1));
    return {grad.to(ctx->saved_data["dtype"].toScalarType()), at::Tensor(), at::Tensor()};
  }
};

// `ops.<namespace>` in TorchScript source: the namespace's operators.
struct OperatorNamespaces : torch::jit::SugaredValue {
  std::string kind() const override { return "operator namespaces"; }
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange&, torch::jit::GraphFunction&,
                                                 const std::string& name) override {
    return std::make_shared<torch::jit::BuiltinModule>(name);
  }
};

// `torch` as the default resolver gives it, aten's operators, and torch.ops besides.
struct TorchWithOps : torch::jit::BuiltinModule {
  TorchWithOps() : BuiltinModule("aten") {}
  std::shared_ptr<torch::jit::SugaredValue> attr(const torch::jit::SourceRange& loc, torch::jit::GraphFunction& m,
                                                 const std::string& field) override {
    if (field == "ops") return std::make_shared<OperatorNamespaces>();
    return BuiltinModule::attr(loc, m, field);
  }
};

struct ResolverWithOps : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction&,
                                                         const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<TorchWithOps>();
    if (name == "ops") return std::make_shared<OperatorNamespaces>();
    return nullptr;
  }
};

}  // namespace

std::shared_ptr<torch::jit::Resolver> script_resolver() { return std::make_shared<ResolverWithOps>(); }

void set_process_group(std::shared_ptr<Group> group) {
  std::lock_guard<std::mutex> lock(process_group_mutex);
  process_group = std::move(group);
}

void set_thread_group(std::shared_ptr<Group> group) { thread_group = std::move(group); }

Group& current_group() {
  if (thread_group) return *thread_group;
  std::lock_guard<std::mutex> lock(process_group_mutex);
  if (!process_group)
    throw std::runtime_error(
        "a tensor-parallel stage ran without its tensor-parallel group: the operators rannc::tp_* need the group "
        "that rannc-run sets up for the stage's ranks");
  return *process_group;
}

at::Tensor vocab_parallel_cross_entropy_sum(const at::Tensor& logits, const at::Tensor& target,
                                            std::int64_t vocab_begin) {
  check_cross_entropy_inputs(logits, target);
  return VocabParallelCrossEntropy::apply(logits, target, vocab_begin);
}

}  // namespace rannc::tp

TORCH_LIBRARY(rannc, m) {
  m.def("tp_copy(Tensor x) -> Tensor");
  m.def("tp_reduce(Tensor x) -> Tensor");
  m.def("tp_gather(Tensor x, int dim) -> Tensor");
  m.def("tp_reduce_scatter(Tensor x, int dim) -> Tensor");
  m.def("tp_split(Tensor x, int dim) -> Tensor");
  m.def("tp_join(Tensor x, int dim) -> Tensor");
}

TORCH_LIBRARY_IMPL(rannc, CompositeImplicitAutograd, m) {
  m.impl("tp_copy", TORCH_FN(rannc::tp::tp_copy));
  m.impl("tp_reduce", TORCH_FN(rannc::tp::tp_reduce));
  m.impl("tp_gather", TORCH_FN(rannc::tp::along_dim<rannc::tp::Gather>));
  m.impl("tp_reduce_scatter", TORCH_FN(rannc::tp::along_dim<rannc::tp::ReduceScatter>));
  m.impl("tp_split", TORCH_FN(rannc::tp::along_dim<rannc::tp::Split>));
  m.impl("tp_join", TORCH_FN(rannc::tp::along_dim<rannc::tp::Join>));
}
