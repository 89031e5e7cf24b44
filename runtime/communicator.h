// c10d process groups of one rank: the world group carries activations and gradients between
// stages (point to point) and the per-step loss; one group per gradient group sums the gradients
// of weights held by several ranks. Gloo on CPU tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/mpi_world.h"
#include "runtime/rank_layout.h"

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace rannc::runtime {

class Communicator {
 public:
  // Every rank calls this together: rank 0 serves a TCPStore whose address goes to the others
  // through MPI, then each rank joins the world group and the groups in `groups` (this rank's,
  // in the one global order RankLayout gives them).
  Communicator(const MpiWorld& world, const std::vector<GradientGroup>& groups, std::chrono::seconds timeout);
  ~Communicator();

  // Starts sending; the tensor is kept until wait_for_sends.
  void send(const at::Tensor& tensor, int peer, int tag);
  at::Tensor receive(const std::vector<std::int64_t>& shape, at::ScalarType dtype, int peer, int tag);
  void wait_for_sends();

  // Sums buffers[i] over the ranks of group i, all groups at once.
  void sum_over_groups(std::vector<at::Tensor>& buffers);
  // The sum of `value` over all ranks.
  double sum_over_world(double value);

  // Milliseconds spent waiting on communication since the last call.
  double take_wait_ms();

 private:
  template <typename F>
  void wait_for(const std::string& what, F&& wait);

  c10::intrusive_ptr<c10d::ProcessGroup> world_;
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups_;  // null where a group is only this rank
  struct PendingSend {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor tensor;  // kept alive until the send completes
    int peer;
  };
  std::vector<PendingSend> sends_;
  double wait_ms_ = 0;
};

}  // namespace rannc::runtime
