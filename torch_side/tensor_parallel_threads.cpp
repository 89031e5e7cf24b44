#include "torch_side/tensor_parallel_threads.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/maximum.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rannc::tp {
namespace {

// What the threads of one group share: the tensors handed in to the collective under way, and
// whether the group is broken (a rank failed or left), with why and by which rank.
class Exchange {
 public:
  explicit Exchange(int size) : handed_in_(static_cast<std::size_t>(size)), kinds_(handed_in_.size()) {}

  int size() const { return static_cast<int>(handed_in_.size()); }

  // Every rank's tensor of the collective `kind`, in rank order, once all have handed theirs in.
  std::vector<at::Tensor> all(int rank, const char* kind, at::Tensor tensor) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (first_left_ >= 0) break_locked(ended_without(first_left_, kind), -1);
    if (broken_) throw std::runtime_error(why_);
    handed_in_[static_cast<std::size_t>(rank)] = std::move(tensor);
    kinds_[static_cast<std::size_t>(rank)] = kind;
    const auto round = round_;
    if (++arrived_ == size()) complete_locked();
    ready_.wait(lock, [&] { return round_ != round || broken_; });
    // A round that completed stands even if the group broke after it.
    if (round_ == round) throw std::runtime_error(why_);
    return result_;
  }

  // The rank's body has ended; `failed`: by an error, which breaks the group. Ranks still in a
  // collective, or that call one later, wait for this rank in vain.
  void leave(int rank, bool failed) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (first_left_ < 0) first_left_ = rank;
    if (failed) break_locked("tensor rank " + std::to_string(rank) + " failed", rank);
    else if (arrived_ > 0) break_locked(ended_without(rank, kinds_[static_cast<std::size_t>(first_arrived())]), -1);
  }

  bool broken() const { return broken_; }
  const std::string& why() const { return why_; }
  int cause() const { return cause_; }  // the rank whose failure broke the group, else -1

 private:
  void complete_locked() {
    for (std::size_t r = 1; r < kinds_.size(); ++r)
      if (kinds_[r] != kinds_[0]) {
        break_locked("tensor rank " + std::to_string(r) + " calls " + kinds_[r] + " where tensor rank 0 calls " +
                         kinds_[0] + ": the ranks call different collectives",
                     -1);
        return;
      }
    result_ = handed_in_;
    for (auto& tensor : handed_in_) tensor = at::Tensor();
    arrived_ = 0;
    ++round_;
    ready_.notify_all();
  }

  static std::string ended_without(int rank, const std::string& kind) {
    return "tensor rank " + std::to_string(rank) + " ended without the " + kind +
           " that the others call: the ranks call different collectives";
  }

  // The first break wins: it is the cause, what follows is its consequence.
  void break_locked(std::string why, int cause) {
    if (!broken_) {
      broken_ = true;
      why_ = std::move(why);
      cause_ = cause;
    }
    ready_.notify_all();
  }

  int first_arrived() const {
    for (std::size_t r = 0; r < handed_in_.size(); ++r)
      if (handed_in_[r].defined()) return static_cast<int>(r);
    return 0;
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<at::Tensor> handed_in_, result_;
  std::vector<std::string> kinds_;
  int arrived_ = 0, first_left_ = -1, cause_ = -1;
  std::uint64_t round_ = 0;
  bool broken_ = false;
  std::string why_;
};

// Sums in rank order, the same order on every rank.
at::Tensor summed(const std::vector<at::Tensor>& parts) {
  at::Tensor sum = parts.front().clone();
  for (std::size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r]);
  return sum;
}

class ThreadRank final : public Group {
 public:
  ThreadRank(std::shared_ptr<Exchange> exchange, int rank) : exchange_(std::move(exchange)), rank_(rank) {}

  int size() const override { return exchange_->size(); }
  int rank() const override { return rank_; }
  void all_reduce_sum(at::Tensor& tensor) override { tensor.copy_(summed(all("all-reduce (sum)", tensor))); }
  void all_reduce_max(at::Tensor& tensor) override {
    auto parts = all("all-reduce (max)", tensor);
    at::Tensor max = parts.front();
    for (std::size_t r = 1; r < parts.size(); ++r) max = at::maximum(max, parts[r]);
    tensor.copy_(max);
  }
  at::Tensor all_gather(const at::Tensor& tensor, std::int64_t dim) override {
    return at::cat(all("all-gather", tensor), dim);
  }
  at::Tensor reduce_scatter(const at::Tensor& tensor, std::int64_t dim) override {
    return summed(all("reduce-scatter", tensor)).chunk(size(), dim).at(static_cast<std::size_t>(rank_)).clone();
  }

 private:
  // A copy is handed in: the caller may change its tensor while other ranks still read it.
  std::vector<at::Tensor> all(const char* kind, const at::Tensor& tensor) {
    return exchange_->all(rank_, kind, tensor.clone());
  }

  std::shared_ptr<Exchange> exchange_;
  int rank_;
};

std::exception_ptr run_rank(const std::shared_ptr<Exchange>& exchange, int rank,
                            const std::function<void(int)>& body) {
  set_thread_group(std::make_shared<ThreadRank>(exchange, rank));
  std::exception_ptr error;
  try {
    body(rank);
  } catch (...) {
    error = std::current_exception();
  }
  exchange->leave(rank, error != nullptr);
  set_thread_group(nullptr);
  return error;
}

}  // namespace

void run_ranks_as_threads(int size, const std::function<void(int rank)>& body) {
  auto exchange = std::make_shared<Exchange>(size);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank)
    threads.emplace_back([&, rank] { errors[static_cast<std::size_t>(rank)] = run_rank(exchange, rank, body); });
  for (auto& thread : threads) thread.join();
  if (exchange->cause() >= 0) std::rethrow_exception(errors[static_cast<std::size_t>(exchange->cause())]);
  // Broken by ranks that disagree: each rank's error only repeats why, through its stage's traceback.
  if (exchange->broken()) throw std::runtime_error(exchange->why());
}

}  // namespace rannc::tp
