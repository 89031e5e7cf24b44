#include "runtime/communicator.h"

#include <ATen/ops/cat.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "runtime/nccl_group.h"
#include "torch_side/torch_error.h"

namespace rannc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0 serves the store on a free port; the others learn "host port" through MPI. Ranks on
// rank 0's host use the loopback address, which needs no name resolution.
c10::intrusive_ptr<c10d::Store> rendezvous(const MpiWorld& world, std::chrono::seconds timeout) {
  c10d::TCPStoreOptions options;
  options.timeout = timeout;
  options.waitWorkers = false;
#if RANNC_TORCH_AT_LEAST(2, 4)
  // libtorch 2.4 made the libuv server the default, and Debian's libtorch 2.6 is built without
  // libuv ("use_libuv was requested but PyTorch was build without libuv support"). The classic
  // server, every build's, serves a rendezvous of a few ranks as well.
  options.useLibUV = false;
#endif
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string address;
  if (world.rank() == 0) {
    options.isServer = true;
    options.port = 0;
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
    address = MpiWorld::hostname() + " " + std::to_string(store->getPort());
  }
  address = world.broadcast(address, 0);
  if (world.rank() != 0) {
    auto space = address.rfind(' ');
    std::string host = address.substr(0, space);
    if (host == MpiWorld::hostname()) host = "127.0.0.1";
    options.port = static_cast<std::uint16_t>(std::stoi(address.substr(space + 1)));
    store = c10::make_intrusive<c10d::TCPStore>(host, options);
  }
  return store;
}

std::shared_ptr<gloo::transport::Device> gloo_device() {
  if (const char* name = std::getenv("GLOO_SOCKET_IFNAME")) return c10d::ProcessGroupGloo::createDeviceForInterface(name);
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<CommGroup> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::seconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = timeout;
  options->devices.push_back(gloo_device());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

// Gloo's worker thread drops its reference to a finished collective (and so to its buffers) a
// moment after wait() returns. Waiting for that (at most a second) frees the buffers here, at the
// same point in every run, so that the peak memory does not depend on thread timing.
void release(c10::intrusive_ptr<c10d::Work>& work) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  if (dynamic_cast<c10d::ProcessGroupGloo::AsyncWork*>(work.get()))
    while (work.use_count() > 1 && Clock::now() < deadline) std::this_thread::yield();
  work.reset();
}

c10::intrusive_ptr<CommGroup> make_group(const CommSettings& settings, const c10::intrusive_ptr<c10d::Store>& store,
                                         const std::string& prefix, int rank, int size, std::chrono::seconds timeout) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  if (settings.nccl) return nccl_group(prefixed, rank, size, timeout);
  return gloo_group(prefixed, rank, size, timeout);
}

}  // namespace

Communicator::Communicator(const MpiWorld& world, const std::vector<GradientGroup>& groups, std::chrono::seconds timeout,
                           CommSettings settings, const std::vector<int>& tensor_group)
    : settings_(settings), staged_(!settings.nccl && !settings.device.is_cpu()) {
  auto store = rendezvous(world, timeout);
  world_ = make_group(settings_, store, "world/", world.rank(), world.size(), timeout);
  auto join = [&](const std::string& prefix, const std::vector<int>& ranks) {
    auto me = std::find(ranks.begin(), ranks.end(), world.rank());
    bool alone = ranks.size() < 2;
    return alone ? c10::intrusive_ptr<CommGroup>()
                 : make_group(settings_, store, prefix, static_cast<int>(me - ranks.begin()), static_cast<int>(ranks.size()),
                              timeout);
  };
  for (const auto& group : groups) groups_.push_back(join("gradients " + group.key + "/", group.ranks));
  // Named by its first rank: one group per set of ranks.
  if (!tensor_group.empty()) tensor_group_ = join("tensor " + std::to_string(tensor_group.front()) + "/", tensor_group);
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return world_->getRank(); }

std::string Communicator::backend_text() const {
  return settings_.nccl ? "NCCL" : staged_ ? "Gloo (through host memory)" : "Gloo";
}

at::Tensor Communicator::to_wire(const at::Tensor& tensor) const {
  return staged_ ? tensor.to(at::kCPU).contiguous() : tensor.contiguous();
}

at::TensorOptions Communicator::wire_options() const {
  return at::TensorOptions().device(staged_ ? c10::Device(c10::DeviceType::CPU) : settings_.device);
}

// Waits, adding the time to the communication total; a failure says what was being waited for
// (a transfer names its peer: when a rank dies, the others say whom they lost).
template <typename F>
void Communicator::wait_for(const std::string& what, F&& wait) {
  auto start = Clock::now();
  try {
    wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(what + " failed: " + torch_message(e));
  }
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void Communicator::send(const at::Tensor& tensor, int peer, int tag) {
  std::vector<at::Tensor> tensors{to_wire(tensor)};
  auto work = world_->send(tensors, peer, tag);
  sends_.push_back({work, tensors.front(), peer, tag});
}

Communicator::Receive Communicator::start_receive(const std::vector<std::int64_t>& shape, at::ScalarType dtype,
                                                  int peer, int tag) {
  std::vector<at::Tensor> tensors{at::empty(shape, wire_options().dtype(dtype))};
  c10::intrusive_ptr<c10d::Work> work;
  wait_for("receiving from rank " + std::to_string(peer), [&] { work = world_->recv(tensors, peer, tag); });
  return {work, tensors.front(), peer};
}

at::Tensor Communicator::finish(Receive& receive) {
  wait_for("receiving from rank " + std::to_string(receive.peer), [&] { receive.work->wait(); });
  receive.work.reset();
  return staged_ ? receive.tensor.to(settings_.device) : receive.tensor;
}

void Communicator::wait_for_sends_to(int peer, const std::function<bool(int tag)>& delivered) {
  auto done = std::stable_partition(sends_.begin(), sends_.end(),
                                    [&](const PendingSend& send) { return send.peer != peer || !delivered(send.tag); });
  for (auto it = done; it != sends_.end(); ++it)
    wait_for("sending to rank " + std::to_string(peer), [&] { it->work->wait(); });
  sends_.erase(done, sends_.end());
}

void Communicator::wait_for_sends() {
  for (auto& send : sends_) wait_for("sending to rank " + std::to_string(send.peer), [&] { send.work->wait(); });
  sends_.clear();
}

void Communicator::sum_over_groups(std::vector<at::Tensor>& buffers) {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  std::vector<std::pair<std::size_t, at::Tensor>> staged;  // host copies of GPU buffers
  for (std::size_t i = 0; i < groups_.size(); ++i) {
    if (!groups_[i]) continue;
    std::vector<at::Tensor> tensors{staged_ ? to_wire(buffers.at(i)) : buffers.at(i)};
    if (staged_) staged.emplace_back(i, tensors.front());
    works.push_back(groups_[i]->allreduce(tensors));
  }
  for (auto& work : works) {
    wait_for("summing gradients", [&] { work->wait(); });
    release(work);
  }
  for (auto& [i, host] : staged) buffers[i].copy_(host);
}

CommGroup& Communicator::group(int index) const {
  const auto& group = groups_.at(static_cast<std::size_t>(index));
  if (!group) throw std::logic_error("gradient group " + std::to_string(index) + " has only this rank");
  return *group;
}

void Communicator::reduce_scatter(int index, const at::Tensor& input, at::Tensor& output) {
  auto& pg = group(index);
  at::Tensor flat = to_wire(input);
  at::Tensor received = at::empty_like(flat);
  std::vector<std::int64_t> even_split;  // empty: equal chunks
  c10::intrusive_ptr<c10d::Work> work;
  wait_for("reduce-scattering gradients", [&] {
    work = pg.alltoall_base(received, flat, even_split, even_split);
    work->wait();
  });
  release(work);
  output.copy_(received.view({pg.getSize(), -1}).sum(0));
}

void Communicator::all_gather(int index, const at::Tensor& input, at::Tensor& output) {
  auto& pg = group(index);
  std::vector<at::Tensor> inputs{to_wire(input)};
  at::Tensor gathered = staged_ ? at::empty(output.sizes(), wire_options().dtype(output.scalar_type())) : output;
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (const auto& chunk : gathered.view({pg.getSize(), -1}).unbind(0)) outputs[0].push_back(chunk);
  c10::intrusive_ptr<c10d::Work> work;
  wait_for("all-gathering updated weights", [&] {
    work = pg.allgather(outputs, inputs);
    work->wait();
  });
  release(work);
  if (staged_) output.copy_(gathered);
}

double Communicator::sum_over_world(double value) {
  auto tensor = at::tensor({value}, at::TensorOptions().dtype(at::kDouble)).to(wire_options().device());
  sum_over_world(tensor, "summing the loss over all ranks");
  return tensor.item<double>();
}

void Communicator::sum_over_world(at::Tensor& tensor, const std::string& what) {
  std::vector<at::Tensor> tensors{to_wire(tensor)};
  c10::intrusive_ptr<c10d::Work> work;
  wait_for(what, [&] {
    work = world_->allreduce(tensors);
    work->wait();
  });
  release(work);
  if (staged_ || !tensors.front().is_same(tensor)) tensor.copy_(tensors.front());
}

std::vector<at::Tensor> Communicator::all_to_all(const std::vector<at::Tensor>& to_each, const std::string& what) {
  const auto n = to_each.size();
  std::vector<std::int64_t> send_sizes(n), ones(n, 1);
  for (std::size_t r = 0; r < n; ++r) send_sizes[r] = to_each[r].numel();
  auto counts = at::tensor(send_sizes, at::TensorOptions().dtype(at::kLong)).to(wire_options().device());
  auto received_counts = at::empty_like(counts);
  std::vector<std::int64_t> ones_out = ones;
  wait_for(what + " (sizes)", [&] { world_->alltoall_base(received_counts, counts, ones_out, ones)->wait(); });
  auto host_counts = received_counts.to(at::kCPU);
  std::vector<std::int64_t> receive_sizes(host_counts.data_ptr<std::int64_t>(), host_counts.data_ptr<std::int64_t>() + n);
  std::vector<at::Tensor> flat;
  for (const auto& tensor : to_each) flat.push_back(to_wire(tensor.reshape({-1})));
  at::Tensor sent = at::cat(flat);
  std::int64_t total = 0;
  for (auto size : receive_sizes) total += size;
  at::Tensor received = at::empty({total}, wire_options().dtype(sent.scalar_type()));
  // Copies: Gloo's alltoall_base moves the split sizes it is given into its work.
  auto receive_splits = receive_sizes, send_splits = send_sizes;
  c10::intrusive_ptr<c10d::Work> work;
  wait_for(what, [&] {
    work = world_->alltoall_base(received, sent, receive_splits, send_splits);
    work->wait();
  });
  release(work);
  // Back on the device the tensors came from (the embedding exchange keeps them on the host).
  const auto device = n > 0 ? to_each.front().device() : settings_.device;
  std::vector<at::Tensor> parts;
  std::int64_t at = 0;
  for (auto size : receive_sizes) {
    parts.push_back(received.narrow(0, at, size).to(device));
    at += size;
  }
  return parts;
}

double Communicator::take_wait_ms() {
  double ms = wait_ms_;
  wait_ms_ = 0;
  return ms;
}

}  // namespace rannc::runtime
