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
