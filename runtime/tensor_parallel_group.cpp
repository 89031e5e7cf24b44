#include "runtime/tensor_parallel_group.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/stack.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "torch_side/torch_error.h"

namespace rannc::runtime {
namespace {

// Starts a collective and waits for it; a failure (the timeout among them) says which one.
template <typename Start>
void run(const char* what, Start&& start) {
  try {
    start()->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("the tensor-parallel group's ") + what + " failed: " + torch_message(e));
  }
}

// Gloo reduces no bfloat16 (a bf16-mixed plan's products): such tensors travel as float32,
// summed there and rounded once on the way back.
at::Tensor to_wire(const CommGroup& group, const at::Tensor& tensor) {
  bool widen = tensor.scalar_type() == at::kBFloat16 && group.getBackendName() == "gloo";
  return widen ? tensor.to(at::kFloat) : tensor.contiguous();  // c10d takes dense tensors only
}

void all_reduce(CommGroup& group, at::Tensor& tensor, c10d::ReduceOp::RedOpType op, std::chrono::milliseconds timeout,
                const char* what) {
  std::vector<at::Tensor> tensors{to_wire(group, tensor)};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  options.timeout = timeout;
  run(what, [&] { return group.allreduce(tensors, options); });
  if (!tensors.front().is_same(tensor)) tensor.copy_(tensors.front());
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(c10::intrusive_ptr<CommGroup> group, std::chrono::milliseconds timeout)
    : group_(std::move(group)), timeout_(timeout) {}

int TensorParallelGroup::size() const { return group_->getSize(); }

int TensorParallelGroup::rank() const { return group_->getRank(); }

void TensorParallelGroup::all_reduce_sum(at::Tensor& tensor) {
  all_reduce(*group_, tensor, c10d::ReduceOp::SUM, timeout_, "all-reduce (sum)");
}

void TensorParallelGroup::all_reduce_max(at::Tensor& tensor) {
  all_reduce(*group_, tensor, c10d::ReduceOp::MAX, timeout_, "all-reduce (max)");
}

at::Tensor TensorParallelGroup::all_gather(const at::Tensor& tensor, std::int64_t dim) {
  std::vector<at::Tensor> input{to_wire(*group_, tensor)};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < size(); ++r) outputs[0].push_back(at::empty(input[0].sizes(), input[0].options()));
  c10d::AllgatherOptions options;
  options.timeout = timeout_;
  run("all-gather", [&] { return group_->allgather(outputs, input, options); });
  return at::cat(outputs[0], dim).to(tensor.scalar_type());
}

// Gloo has no reduce-scatter (libtorch 1.13's throws), so, as Communicator::reduce_scatter does,
// an all-to-all sends the r-th chunk to rank r and each rank sums what it receives: each rank
// sends and receives (n - 1) / n of the tensor, as a ring reduce-scatter does.
at::Tensor TensorParallelGroup::reduce_scatter(const at::Tensor& tensor, std::int64_t dim) {
  const int n = size();
  if (tensor.size(dim) % n != 0)
    throw std::invalid_argument("reduce-scatter over " + std::to_string(n) + " ranks of a dim of size " +
                                std::to_string(tensor.size(dim)));
  at::Tensor chunks = at::stack(to_wire(*group_, tensor).chunk(n, dim));  // [n, chunk...], the r-th for rank r
  at::Tensor received = at::empty_like(chunks);
  std::vector<std::int64_t> equal_split;  // empty: n equal parts of dim 0
  c10d::AllToAllOptions options;
  options.timeout = timeout_;
  run("reduce-scatter", [&] { return group_->alltoall_base(received, chunks, equal_split, equal_split, options); });
  // In the wire's dtype (integers would sum to int64), then the tensor's.
  return received.sum(0, /*keepdim=*/false, received.scalar_type()).to(tensor.scalar_type());
}

}  // namespace rannc::runtime
