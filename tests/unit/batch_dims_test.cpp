#include <catch2/catch.hpp>

#include "graph_builders.h"
#include "ir/batch_dims.h"

using namespace rannc::ir;
using rannc::testing::add_tensor;

namespace {

// x[4,8] -> linear(w) -> y[4,16] -> transpose -> t[16,4]; w.t() -> wt (param-only chain).
struct Sample {
  Graph g;
  ValueId x, w, y, t, wt;
  Sample() {
    x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
    w = add_tensor(g, "w", {16, 8}, ValueRole::kParam);
    y = add_tensor(g, "y", {4, 16});
    t = add_tensor(g, "t", {16, 4});
    wt = add_tensor(g, "wt", {8, 16});
    g.add_op("aten::linear", {x, w}, {y});
    g.add_op("aten::t", {y}, {t});
    g.add_op("aten::t", {w}, {wt});
  }
};

}  // namespace

TEST_CASE("batch dependence flows from inputs, not from weights") {
  Sample s;
  propagate_batch_dependence(s.g);
  CHECK(s.g.value(s.x).batch_dependent);
  CHECK(s.g.value(s.y).batch_dependent);
  CHECK(s.g.value(s.t).batch_dependent);
  CHECK_FALSE(s.g.value(s.w).batch_dependent);
  CHECK_FALSE(s.g.value(s.wt).batch_dependent);
}

TEST_CASE("batch dims come from comparing shapes at two batch sizes") {
  Sample s;
  ShapesAtDoubleBatch other(s.g.values().size());
  other[s.x] = {{8, 8}};
  other[s.y] = {{8, 16}};
  other[s.t] = {{16, 8}};  // the batch dim moved: transposed
  other[s.wt] = {{8, 16}};
  assign_batch_dims(s.g, 4, other);
  CHECK(s.g.value(s.x).type.batch_dim == 0);
  CHECK(s.g.value(s.y).type.batch_dim == 0);
  CHECK(s.g.value(s.t).type.batch_dim == 1);
  CHECK(s.g.value(s.wt).type.batch_dim == -1);
  CHECK(s.g.value(s.w).type.batch_dim == -1);  // weights never have one
}

TEST_CASE("without a second evaluation, a batch-dependent tensor takes the first dim equal to the batch") {
  Sample s;
  assign_batch_dims(s.g, 4, {});
  CHECK(s.g.value(s.y).type.batch_dim == 0);
  CHECK(s.g.value(s.t).type.batch_dim == 1);
  CHECK(s.g.value(s.wt).type.batch_dim == -1);
}

namespace {

// The traced form of `x.view(x.size(0), -1)` with a mask built from the sequence length:
// n = size(x, 0) -> NumToTensor -> mul -> Int -> view sizes; mask = ones(x.size(1)).triu().
struct SizeGlue {
  Graph g;
  ValueId x, n, n_tensor, n_times, mask, zeros, v;
  SizeGlue() {
    using rannc::testing::add_literal;
    x = add_tensor(g, "x", {4, 6}, ValueRole::kModelInput);
    auto zero = add_literal(g, "zero", std::int64_t{0}, ValueKind::kInt);
    n = add_literal(g, "n", std::int64_t{4}, ValueKind::kInt);
    g.add_op("aten::size", {x, zero}, {n});
    n_tensor = add_tensor(g, "n_tensor", {}, ValueRole::kIntermediate, DType::kInt64);
    g.add_op("prim::NumToTensor", {n}, {n_tensor});
    n_times = add_tensor(g, "n_times", {}, ValueRole::kIntermediate, DType::kInt64);
    g.add_op("aten::mul", {n_tensor, n_tensor}, {n_times});
    mask = add_tensor(g, "mask", {6, 6});
    g.add_op("aten::triu", {n_times}, {mask});
    zeros = add_tensor(g, "zeros", {4, 6});
    g.add_op("aten::zeros_like", {x}, {zeros});
    v = add_tensor(g, "v", {4, 6});
    g.add_op("aten::add", {x, zeros}, {v});
  }
};

}  // namespace

TEST_CASE("values computed from shapes alone depend on the batch but not on its contents") {
  SizeGlue s;
  propagate_batch_dependence(s.g);
  for (auto id : {s.n, s.n_tensor, s.n_times, s.mask, s.zeros}) {
    CHECK(s.g.value(id).batch_dependent);
    CHECK_FALSE(s.g.value(id).data_dependent);
  }
  CHECK(s.g.value(s.x).data_dependent);
  CHECK(s.g.value(s.v).data_dependent);
}

TEST_CASE("a tensor of zeros that an op fills from the batch in place holds data") {
  // z = x.new_zeros(...); z[:, :8].copy_(x): what reads z after the copy reads the batch.
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  auto z = add_tensor(g, "z", {4, 16});
  g.add_op("aten::new_zeros", {x}, {z});
  auto view = add_tensor(g, "view", {4, 8});
  g.add_op("aten::slice", {z}, {view});
  auto copied = add_tensor(g, "copied", {4, 8});
  auto copy = g.add_op("aten::copy_", {view, x}, {copied});
  g.add_write(copy, view);
  g.add_write(copy, z);
  auto y = add_tensor(g, "y", {4, 16});
  g.add_op("aten::relu", {z}, {y});
  propagate_batch_dependence(g);
  CHECK(g.value(z).data_dependent);
  CHECK(g.value(y).data_dependent);
  CHECK(g.value(z).writers == std::vector<OpId>{copy});
  CHECK(g.op(copy).writes == std::vector<ValueId>{view, z});
}

TEST_CASE("shapes evaluated at a few samples scale along the batch dim to the requested batch") {
  Sample s;
  ShapesAtDoubleBatch other(s.g.values().size());
  other[s.x] = {{8, 8}};
  other[s.y] = {{8, 16}};
  other[s.t] = {{16, 8}};
  assign_batch_dims(s.g, 4, other);
  scale_batch(s.g, 4, 1000);
  CHECK(s.g.value(s.x).type.shape == std::vector<std::int64_t>{1000, 8});
  CHECK(s.g.value(s.t).type.shape == std::vector<std::int64_t>{16, 1000});
  CHECK(s.g.value(s.wt).type.shape == std::vector<std::int64_t>{8, 16});
  // A batch that makes a tensor's size leave int64 is refused, not wrapped around.
  CHECK_THROWS_WITH(scale_batch(s.g, 1000, std::int64_t{1} << 62), Catch::Contains("too large"));
}
