// Which row of the data set each sample of a step is. The rows are cut into steps of the global
// batch, whole steps only (the rows short of one at the end are left out of every epoch); a run
// longer than that starts over. With a shuffle, each epoch takes the rows in a permutation drawn
// from (seed, epoch) by Fisher-Yates over splitmix64, which tests/runtime/training_reference.py
// repeats in Python. Plain C++, unit-tested.
#pragma once

#include <cstdint>
#include <vector>

namespace rannc::runtime {

class DataOrder {
 public:
  // Throws InputError when the data set holds fewer rows than one global batch.
  DataOrder(std::int64_t rows, std::int64_t global_batch, bool shuffle, std::uint64_t seed);

  // The data set row of sample `sample` (0 <= sample < global batch) of step `step`.
  std::int64_t row(std::int64_t step, std::int64_t sample);
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }

 private:
  std::int64_t rows_, global_batch_, steps_per_epoch_;
  bool shuffle_;
  std::uint64_t seed_;
  std::int64_t epoch_ = -1;             // whose permutation `permutation_` holds
  std::vector<std::int64_t> permutation_;
};

// The permutation of 0..n-1 of an epoch (exposed for the unit test).
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace rannc::runtime
