// plan/tensor_slices.h's rule on tensors: a tensor rank's part of a split weight, and the whole
// weight again from every rank's part. rannc-run's --init cuts a PyTorch state_dict so, and
// `rannc-partition export` joins a tensor-parallel checkpoint so. Header-only: the plugin and
// the runtime both use it.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/tensor_slices.h"
#include "support/error.h"

namespace rannc {

// The slices of `whole` along `dim`, one after another (plan::weight_slices gives a rank's).
inline at::Tensor sliced(const at::Tensor& whole, int dim, const std::vector<plan::DimSlice>& slices) {
  std::vector<at::Tensor> parts;
  for (const auto& slice : slices) parts.push_back(whole.narrow(dim, slice.begin, slice.length));
  return at::cat(parts, dim).contiguous();
}

// Rank `rank` of `degree`'s slices of `whole` along the split dim, in part order.
inline at::Tensor rank_slices(const at::Tensor& whole, const plan::TensorParallel::SplitWeight& split, int degree,
                              int rank) {
  return sliced(whole, split.dim, plan::weight_slices(whole.size(split.dim), split.groups, degree, rank));
}

// The whole weight from each tensor rank's slices (`ranks`, in rank order): the dim is as long as
// theirs together. InputError when a rank holds other than its share of it.
inline at::Tensor joined_slices(const std::vector<at::Tensor>& ranks, const plan::TensorParallel::SplitWeight& split) {
  const int degree = static_cast<int>(ranks.size());
  std::int64_t size = 0;
  for (const auto& part : ranks) size += part.size(split.dim);
  std::vector<std::vector<plan::DimSlice>> slices;
  for (int r = 0; r < degree; ++r) {
    slices.push_back(plan::weight_slices(size, split.groups, degree, r));
    std::int64_t share = 0;
    for (const auto& slice : slices.back()) share += slice.length;
    if (share != ranks[static_cast<std::size_t>(r)].size(split.dim))
      throw InputError("'" + split.name + "': tensor rank " + std::to_string(r) + " holds " +
                       std::to_string(ranks[static_cast<std::size_t>(r)].size(split.dim)) + " of dim " +
                       std::to_string(split.dim) + ", its share of " + std::to_string(size) + " is " +
                       std::to_string(share));
  }
  // Part by part, and within a part rank by rank: the whole dim's order.
  std::vector<at::Tensor> pieces;
  std::vector<std::int64_t> taken(ranks.size(), 0);
  for (int g = 0; g < split.groups; ++g) {
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      auto length = slices[r][static_cast<std::size_t>(g)].length;
      pieces.push_back(ranks[r].narrow(split.dim, taken[r], length));
      taken[r] += length;
    }
  }
  return at::cat(pieces, split.dim);
}

}  // namespace rannc
