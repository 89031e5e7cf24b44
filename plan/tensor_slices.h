// Which part of a split weight each tensor rank holds: the one rule the stage-file writer, the
// runtime's vocabulary-parallel cross entropy and the tests that add the slices up all follow.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plan/plan.h"

namespace rannc::plan {

// [begin, begin + length) along one dim.
struct DimSlice {
  std::int64_t begin = 0, length = 0;
};

// Rank `rank` of `degree`'s slice of a dim of `size`, as torch.tensor_split cuts it: the first
// size mod degree slices are one longer (a vocabulary of 50257 rows over 4 ranks: 12565, 12564,
// 12564, 12564).
inline DimSlice tensor_slice(std::int64_t size, int degree, int rank) {
  std::int64_t base = size / degree, longer = size % degree;
  return {rank * base + (rank < longer ? rank : longer), base + (rank < longer ? 1 : 0)};
}

// A weight's slices of rank `rank` along its split dim of `size` (TensorParallel::SplitWeight):
// the dim is `groups` equal parts (a fused QKV's q, k and v), each cut as tensor_slice cuts it;
// the rank holds its slice of every part, in part order.
inline std::vector<DimSlice> weight_slices(std::int64_t size, int groups, int degree, int rank) {
  std::vector<DimSlice> slices;
  std::int64_t part = size / groups;
  for (int g = 0; g < groups; ++g) {
    DimSlice slice = tensor_slice(part, degree, rank);
    slice.begin += g * part;
    slices.push_back(slice);
  }
  return slices;
}

// Whether output `o` of `stage` is a vocabulary head's logits, which stay split along their last
// dim over the stage's tensor-parallel group (rank r holds its tensor_slice of the classes): the
// stage's first model output, where the stage splits the output layer that makes it.
inline bool split_logits(const Stage& stage, std::size_t o) {
  const auto& regions = stage.tensor_parallel.regions;
  bool head = std::any_of(regions.begin(), regions.end(),
                          [](const TensorParallel::Region& region) { return region.kind == RegionKind::kVocabularyHead; });
  auto first = std::find_if(stage.outputs.begin(), stage.outputs.end(), [](const Tensor& t) { return t.model_output; });
  return head && first != stage.outputs.end() && static_cast<std::size_t>(first - stage.outputs.begin()) == o;
}

}  // namespace rannc::plan
