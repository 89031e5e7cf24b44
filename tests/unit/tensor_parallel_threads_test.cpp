// The in-memory group of ranks run as threads (torch_side/tensor_parallel_threads.h), which verify
// chains the tensor ranks' stage files with: its collectives against the same computation on the
// whole tensors, the operators over it, and a rank that fails or calls other collectives than the
// rest ending the run with one error instead of leaving the others waiting.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "torch_side/tensor_parallel_ops.h"
#include "torch_side/tensor_parallel_threads.h"

// Last: glog, which libtorch includes, defines a CHECK of its own that would replace Catch's.
#include <catch2/catch.hpp>

namespace rannc::tp {
namespace {

constexpr int kRanks = 3;

std::vector<at::Tensor> randoms(int n, at::IntArrayRef shape) {
  std::vector<at::Tensor> tensors;
  for (int r = 0; r < n; ++r) tensors.push_back(at::randn(shape, at::kDouble));
  return tensors;
}

at::Tensor sum(const std::vector<at::Tensor>& tensors) { return at::stack(tensors).sum(0); }

// What body(group, rank) returns on each rank (Catch2's checks are not thread-safe).
template <typename Body>
std::vector<at::Tensor> on_each_rank(Body body) {
  std::vector<at::Tensor> results(kRanks);
  run_ranks_as_threads(kRanks, [&](int rank) { results[rank] = body(current_group(), rank); });
  return results;
}

std::string error_of(const std::function<void(int)>& body) {
  try {
    run_ranks_as_threads(kRanks, body);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("tensor parallel threads: the collectives give every rank the whole computation's result") {
  at::manual_seed(11);
  auto inputs = randoms(kRanks, {kRanks * 2, 5});
  auto summed = on_each_rank([&](Group& group, int rank) {
    at::Tensor x = inputs[rank].clone();
    group.all_reduce_sum(x);
    return x;
  });
  auto maxima = on_each_rank([&](Group& group, int rank) {
    at::Tensor x = inputs[rank].clone();
    group.all_reduce_max(x);
    return x;
  });
  auto gathered = on_each_rank([&](Group& group, int rank) { return group.all_gather(inputs[rank], 1); });
  auto scattered = on_each_rank([&](Group& group, int rank) { return group.reduce_scatter(inputs[rank], 0); });
  for (int r = 0; r < kRanks; ++r) {
    CHECK(summed[r].allclose(sum(inputs)));
    CHECK(summed[r].equal(summed[0]));  // summed in one order on every rank
    CHECK(maxima[r].equal(std::get<0>(at::stack(inputs).max(0))));
    CHECK(gathered[r].equal(at::cat(inputs, 1)));
    CHECK(scattered[r].allclose(sum(inputs).chunk(kRanks, 0)[r]));
  }
}

TEST_CASE("tensor parallel threads: an operator's backward finds the thread's group") {
  at::manual_seed(12);
  auto weights = randoms(kRanks, {4, 2});
  at::Tensor x = at::randn({4, 2}, at::kDouble);
  auto grads = on_each_rank([&](Group&, int rank) {
    at::Tensor leaf = x.clone().requires_grad_();
    auto copy = c10::Dispatcher::singleton().findSchemaOrThrow(kCopy, "").typed<at::Tensor(const at::Tensor&)>();
    at::Tensor y = copy.call(leaf);
    (y * weights[rank]).sum().backward();
    return leaf.grad();
  });
  for (const auto& grad : grads) CHECK(grad.allclose(sum(weights)));
}

TEST_CASE("tensor parallel threads: a rank that fails ends the run with its own error") {
  auto error = error_of([](int rank) {
    if (rank == 1) throw std::invalid_argument("rank 1's stage is wrong");
    at::Tensor x = at::ones({2});
    current_group().all_reduce_sum(x);  // the others wait here for rank 1, which never comes
  });
  CHECK(error == "rank 1's stage is wrong");
}

TEST_CASE("tensor parallel threads: ranks that call different collectives are an error, not a wait") {
  auto early = error_of([](int rank) {
    if (rank == 2) return;
    at::Tensor x = at::ones({2});
    current_group().all_reduce_sum(x);
  });
  CHECK(early == "tensor rank 2 ended without the all-reduce (sum) that the others call: the ranks call different collectives");
  auto other = error_of([](int rank) {
    at::Tensor x = at::ones({2});
    if (rank == 1) current_group().all_gather(x, 0);
    else current_group().all_reduce_sum(x);
  });
  CHECK(other == "tensor rank 1 calls all-gather where tensor rank 0 calls all-reduce (sum): the ranks call different collectives");
}

}  // namespace
}  // namespace rannc::tp
