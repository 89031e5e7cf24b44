// c10d process groups of one rank: the world group carries activations and gradients between
// stages (point to point) and the per-step loss; one group per gradient group sums the gradients
// of weights held by several ranks. NCCL on GPU tensors when every rank has a GPU of its own
// (nccl_group.h), else Gloo, which takes CPU tensors: a rank whose stage runs on a GPU stages
// what it sends and receives through host memory (several ranks sharing one GPU).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "runtime/mpi_world.h"
#include "runtime/rank_layout.h"
#include "torch_side/torch_version.h"

namespace c10d {
class ProcessGroup;
class Backend;
}  // namespace c10d

namespace rannc::runtime {

// libtorch 2 split the process group into a dispatcher and its backends (Gloo, NCCL); the
// backends are what this uses. libtorch 1.x's ProcessGroupGloo is the group itself.
#if RANNC_TORCH_AT_LEAST(2, 0)
using CommGroup = c10d::Backend;
#else
using CommGroup = c10d::ProcessGroup;
#endif

// Where the tensors live and which c10d backend carries them.
struct CommSettings {
  c10::Device device = c10::Device(c10::DeviceType::CPU);  // where the stage computes
  bool nccl = false;  // NCCL (the device is a GPU of this rank's own); else Gloo
};

class Communicator {
 public:
  // Every rank calls this together: rank 0 serves a TCPStore whose address goes to the others
  // through MPI, then each rank joins the world group, the groups in `groups` (this rank's, in
  // the one global order RankLayout gives them) and its tensor-parallel group (`tensor_group`,
  // RankLayout::tensor_group: none when it is the rank alone).
  Communicator(const MpiWorld& world, const std::vector<GradientGroup>& groups, std::chrono::seconds timeout,
               CommSettings settings = {}, const std::vector<int>& tensor_group = {});
  ~Communicator();

  int rank() const;  // in the world

  // "NCCL" or "Gloo", with " (through host memory)" when Gloo carries a GPU's tensors.
  std::string backend_text() const;

  // A receive under way: `finish` waits for it.
  struct Receive {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor tensor;  // on the wire's device until finished
    int peer = 0;
  };

  // Starts sending; the tensor is kept until the send is waited for. Tensors are on the
  // settings' device; what `finish` returns is too.
  void send(const at::Tensor& tensor, int peer, int tag);
  Receive start_receive(const std::vector<std::int64_t>& shape, at::ScalarType dtype, int peer, int tag);
  at::Tensor finish(Receive& receive);
  // Whether receives may start before the receives and sends ahead of them in program order
  // are done. Gloo matches messages by tag, so a receive started early waits for its own message.
  // NCCL ignores tags and matches a pair's sends and receives by order on one stream, so a receive
  // started early would queue in front of sends the peer needs first.
  bool receives_start_early() const { return !settings_.nccl; }
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
  // `tensor` summed over all ranks, in place; `what` names it in errors.
  void sum_over_world(at::Tensor& tensor, const std::string& what);
  // Sends `to_each[r]` (1-D, one dtype and device for all) to rank r and returns what each rank
  // sent this one, in rank order, on that device: the sizes first (one count per pair), then the data in one all-to-all.
  // Sharded embedding tables exchange ids, pooled rows and their gradients this way. `what`
  // names it in errors.
  std::vector<at::Tensor> all_to_all(const std::vector<at::Tensor>& to_each, const std::string& what);

  // Milliseconds spent waiting on communication since the last call.
  double take_wait_ms();

  // The tensor-parallel group's c10d group (null without one), for runtime/tensor_parallel_group.h.
  const c10::intrusive_ptr<CommGroup>& tensor_group() const { return tensor_group_; }

 private:
  template <typename F>
  void wait_for(const std::string& what, F&& wait);
  CommGroup& group(int index) const;
  // A tensor as the backend takes it: on the host when Gloo carries a GPU's tensors.
  at::Tensor to_wire(const at::Tensor& tensor) const;
  at::TensorOptions wire_options() const;

  CommSettings settings_;
  bool staged_;  // Gloo with a GPU: tensors go through host memory
  c10::intrusive_ptr<CommGroup> world_;
  std::vector<c10::intrusive_ptr<CommGroup>> groups_;  // null where a group is only this rank
  c10::intrusive_ptr<CommGroup> tensor_group_;
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
