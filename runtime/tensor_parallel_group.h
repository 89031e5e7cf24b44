// The tensor-parallel group of a rank over a c10d group: what the rannc::tp_* operators of a
// tensor-parallel stage call (torch_side/tensor_parallel_ops.h). Gloo on CPU tensors; the
// collectives take tensors where they are, so that NCCL on GPU tensors works the same way.
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/communicator.h"
#include "torch_side/tensor_parallel_ops.h"

namespace rannc::runtime {

class TensorParallelGroup final : public tp::Group {
 public:
  // `group` holds exactly the ranks of one tensor-parallel group; a collective that takes longer
  // than `timeout` fails.
  TensorParallelGroup(c10::intrusive_ptr<CommGroup> group, std::chrono::milliseconds timeout);

  int size() const override;
  int rank() const override;
  void all_reduce_sum(at::Tensor& tensor) override;
  void all_reduce_max(at::Tensor& tensor) override;
  at::Tensor all_gather(const at::Tensor& tensor, std::int64_t dim) override;
  at::Tensor reduce_scatter(const at::Tensor& tensor, std::int64_t dim) override;

 private:
  c10::intrusive_ptr<CommGroup> group_;
  std::chrono::milliseconds timeout_;
};

}  // namespace rannc::runtime
