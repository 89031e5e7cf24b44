// torch_side/tensor_rank_slices.h: a tensor rank's slices of a whole weight (what --init loads)
// are torch.tensor_split's, part by part, and joining every rank's slices (what export does to a
// tensor-parallel checkpoint) gives the whole weight back.
#include <ATen/ATen.h>

#include <vector>

#include "support/error.h"
#include "torch_side/tensor_rank_slices.h"

// Last: glog, which libtorch includes, defines a CHECK of its own that would replace Catch's.
#include <catch2/catch.hpp>

namespace rannc {
namespace {

std::vector<at::Tensor> every_rank(const at::Tensor& whole, const plan::TensorParallel::SplitWeight& split, int degree) {
  std::vector<at::Tensor> ranks;
  for (int r = 0; r < degree; ++r) ranks.push_back(rank_slices(whole, split, degree, r));
  return ranks;
}

}  // namespace

TEST_CASE("tensor rank slices: tensor_split's cut, joined back whole", "[tensor_parallel]") {
  // A vocabulary of 1001 rows over 4 ranks: the first row longer, as torch.tensor_split cuts.
  auto table = at::arange(1001 * 3, at::kFloat).reshape({1001, 3});
  plan::TensorParallel::SplitWeight rows{"tok_emb.weight", 0, 1};
  auto ranks = every_rank(table, rows, 4);
  auto expected = at::tensor_split(table, 4, 0);
  for (int r = 0; r < 4; ++r) CHECK(at::equal(ranks[static_cast<std::size_t>(r)], expected[static_cast<std::size_t>(r)]));
  CHECK(at::equal(joined_slices(ranks, rows), table));

  // A fused QKV's columns, 3 parts of 6 over 2 ranks: rank 1 holds columns 3-5, 9-11 and 15-17.
  auto qkv = at::arange(4 * 18, at::kFloat).reshape({4, 18});
  plan::TensorParallel::SplitWeight fused{"qkv.weight", 1, 3};
  ranks = every_rank(qkv, fused, 2);
  CHECK(at::equal(ranks[1], at::cat({qkv.narrow(1, 3, 3), qkv.narrow(1, 9, 3), qkv.narrow(1, 15, 3)}, 1)));
  CHECK(at::equal(joined_slices(ranks, fused), qkv));
}

TEST_CASE("tensor rank slices: a rank holding other than its share is refused", "[tensor_parallel]") {
  auto weight = at::zeros({10, 2});
  plan::TensorParallel::SplitWeight rows{"fc.weight", 0, 1};
  // 3 + 7 rows: the rule gives 5 and 5.
  CHECK_THROWS_AS(joined_slices({weight.narrow(0, 0, 3), weight.narrow(0, 3, 7)}, rows), InputError);
}

}  // namespace rannc
