#include "runtime/data_order.h"

#include <numeric>
#include <string>
#include <utility>

#include "support/error.h"

namespace rannc::runtime {
namespace {

// splitmix64 (Steele, Lea and Flood): a generator simple enough to repeat exactly in Python.
std::uint64_t next(std::uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::uint64_t state = seed ^ (static_cast<std::uint64_t>(epoch) + 1) * 0xD1B54A32D192ED03ull;
  for (std::int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<std::int64_t>(next(state) % static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

DataOrder::DataOrder(std::int64_t rows, std::int64_t global_batch, bool shuffle, std::uint64_t seed)
    : rows_(rows), global_batch_(global_batch), steps_per_epoch_(rows / global_batch), shuffle_(shuffle), seed_(seed) {
  if (steps_per_epoch_ < 1) {
    throw InputError("--data: " + std::to_string(rows) + " rows, fewer than one global batch of " +
                     std::to_string(global_batch));
  }
}

std::int64_t DataOrder::row(std::int64_t step, std::int64_t sample) {
  std::int64_t epoch = step / steps_per_epoch_;
  std::int64_t position = (step % steps_per_epoch_) * global_batch_ + sample;
  if (!shuffle_) return position;
  if (epoch != epoch_) {
    permutation_ = epoch_permutation(rows_, seed_, epoch);
    epoch_ = epoch;
  }
  return permutation_[static_cast<std::size_t>(position)];
}

}  // namespace rannc::runtime
