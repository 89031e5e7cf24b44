// c10d process groups of one rank: the world group carries activations and gradients between
// stages (point to point) and the per-step loss; one group per gradient group sums the gradients
// of weights held by several ranks. Gloo on CPU tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
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

  int rank() const;  // in the world

  // Starts sending; the tensor is kept until the send is waited for.
  void send(const at::Tensor& tensor, int peer, int tag);
  at::Tensor receive(const std::vector<std::int64_t>& shape, at::ScalarType dtype, int peer, int tag);
  // Waits for the sends to `peer` whose tag `delivered` says the peer has already received (so the
  // wait returns at once), and frees their tensors.
  void wait_for_sends_to(int peer, const std::function<bool(int tag)>& delivered);
  void wait_for_sends();

  // Sums buffers[i] over the ranks of group i, all groups at once.
  void sum_over_groups(std::vector<at::Tensor>& buffers);
  // In group `group` of n ranks: `input` holds n equal chunks; this rank's `output` becomes the
  // sum over the ranks of their chunk at its own position. Gloo has no reduce-scatter, so this is
  // an all-to-all (chunk j to the j-th rank) and a local sum: each rank sends and receives
  // (n - 1) / n of the input, as a ring reduce-scatter does.
  void reduce_scatter(int group, const at::Tensor& input, at::Tensor& output);
  // In group `group`: `output` (n chunks of input's size) becomes every rank's `input` in rank order.
  void all_gather(int group, const at::Tensor& input, at::Tensor& output);
  // The sum of `value` over all ranks.
  double sum_over_world(double value);

  // Milliseconds spent waiting on communication since the last call.
  double take_wait_ms();

 private:
  template <typename F>
  void wait_for(const std::string& what, F&& wait);
  c10d::ProcessGroup& group(int index) const;

  c10::intrusive_ptr<c10d::ProcessGroup> world_;
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups_;  // null where a group is only this rank
  struct PendingSend {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor tensor;  // kept alive until the send completes
    int peer;
    int tag;
  };
  std::vector<PendingSend> sends_;
  double wait_ms_ = 0;
};

}  // namespace rannc::runtime
