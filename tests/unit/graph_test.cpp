#include <catch2/catch.hpp>

#include "graph_builders.h"
#include "ir/dump.h"
#include "support/error.h"

using namespace rannc;
using namespace rannc::ir;
using rannc::testing::add_tensor;

TEST_CASE("add_op links producers and consumers") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {16, 8}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {4, 16});
  auto z = add_tensor(g, "z", {4, 16});
  auto linear = g.add_op("aten::linear", {x, w}, {y});
  auto relu = g.add_op("aten::relu", {y}, {z});
  g.add_model_output(z);

  CHECK(g.value(y).producer == linear);
  CHECK(g.value(y).consumers == std::vector<OpId>{relu});
  CHECK(g.value(x).consumers == std::vector<OpId>{linear});
  CHECK(g.value(z).model_output);
  CHECK(g.values_with_role(ValueRole::kParam) == std::vector<ValueId>{w});
  CHECK_NOTHROW(g.validate());
}

TEST_CASE("the ops computing a value include those writing it in place") {
  // m = zeros(); fill_(slice(m)); y = relu(m): y needs the fill_, which nothing reads.
  Graph g;
  auto m = add_tensor(g, "m", {4});
  auto zeros = g.add_op("aten::zeros", {}, {m});
  auto view = add_tensor(g, "view", {2});
  auto slice = g.add_op("aten::slice", {m}, {view});
  auto filled = add_tensor(g, "filled", {2});
  auto fill = g.add_op("aten::fill_", {view}, {filled});
  g.add_write(fill, view);
  g.add_write(fill, m);
  auto y = add_tensor(g, "y", {4});
  auto relu = g.add_op("aten::relu", {m}, {y});
  CHECK(g.ops_computing({y}) == std::vector<OpId>{zeros, slice, fill, relu});
  CHECK(g.ops_computing({y}, {m}) == std::vector<OpId>{relu});
  CHECK(graph_to_text(g).find("aten::fill_(%view) writes %view,%m") != std::string::npos);
}

TEST_CASE("topological order puts producers first and keeps insertion order among ready ops") {
  Graph g;
  auto a = add_tensor(g, "a", {1});
  auto b = add_tensor(g, "b", {1});
  auto c = add_tensor(g, "c", {1});
  auto x = add_tensor(g, "x", {1}, ValueRole::kModelInput);
  // Inserted out of order: the consumer of b comes first.
  auto use_b = g.add_op("aten::relu", {b}, {c});
  auto make_a = g.add_op("aten::relu", {x}, {a});
  auto make_b = g.add_op("aten::relu", {a}, {b});
  CHECK(g.topological_order() == std::vector<OpId>{make_a, make_b, use_b});
}

TEST_CASE("a value with two producers is rejected") {
  Graph g;
  auto x = add_tensor(g, "x", {1}, ValueRole::kModelInput);
  auto y = add_tensor(g, "y", {1});
  g.add_op("aten::relu", {x}, {y});
  CHECK_THROWS_AS(g.add_op("aten::neg", {x}, {y}), InputError);
}

TEST_CASE("a cycle is rejected by validate") {
  Graph g;
  auto a = add_tensor(g, "a", {1});
  auto b = add_tensor(g, "b", {1});
  g.add_op("aten::relu", {b}, {a});
  g.add_op("aten::relu", {a}, {b});
  CHECK_THROWS_AS(g.validate(), InputError);
}

TEST_CASE("tensor types count elements and bytes, unknown dims count as zero") {
  TensorType t;
  t.shape = {4, 8};
  t.dtype = DType::kFloat16;
  CHECK(t.numel() == 32);
  CHECK(t.bytes() == 64);
  t.shape = {4, -1};
  CHECK_FALSE(t.shape_known());
  CHECK(t.numel() == 0);
}

TEST_CASE("dumps show ops, shapes and the batch dim") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  auto y = add_tensor(g, "y", {4, 8});
  g.value(x).type.batch_dim = 0;
  g.value(y).type.batch_dim = 0;
  g.add_op("aten::relu", {x}, {y});
  g.add_model_output(y);
  std::string text = graph_to_text(g);
  CHECK_THAT(text, Catch::Matches("(.|\n)*%y = aten::relu\\(%x\\) : float32\\[\\*4,8\\](.|\n)*"));
  auto json = graph_to_json(g);
  CHECK(json["ops"][0]["kind"] == "aten::relu");
  CHECK(json["values"][1]["batch_dim"] == 0);
  CHECK(json["outputs"] == nlohmann::json::array({1}));
}
