#include <catch2/catch.hpp>

#include <algorithm>

#include "graph_builders.h"
#include "ir/batch_dims.h"
#include "partitioner/coarsen.h"
#include "partitioner/units.h"

namespace rannc::partition {
namespace {

using testing::add_tensor;

// x -> linear(w.t()) -> relu -> ... : a chain of `layers` linear+relu pairs whose weights pass
// through a transpose (a param-only chain), plus an aten::size glue read by the last op.
ir::Graph chain(int layers) {
  ir::Graph graph;
  auto x = add_tensor(graph, "x", {8, 16}, ir::ValueRole::kModelInput);
  for (int i = 0; i < layers; ++i) {
    auto w = add_tensor(graph, "w" + std::to_string(i), {16, 16}, ir::ValueRole::kParam);
    auto wt = add_tensor(graph, "wt" + std::to_string(i), {16, 16});
    graph.add_op("aten::t", {w}, {wt});
    auto y = add_tensor(graph, "y" + std::to_string(i), {8, 16});
    graph.add_op("aten::matmul", {x, wt}, {y});
    auto z = add_tensor(graph, "z" + std::to_string(i), {8, 16});
    graph.add_op("aten::relu", {y}, {z});
    x = z;
  }
  graph.add_model_output(x);
  ir::propagate_batch_dependence(graph);
  return graph;
}

}  // namespace

TEST_CASE("units are batch ops with their weight chains copied in", "[units]") {
  ir::Graph graph = chain(3);
  UnitGraph units = build_units(graph);
  REQUIRE(units.units.size() == 6);  // matmul and relu per layer; the transposes are glue
  for (const auto& unit : units.units) {
    const auto& anchor = graph.op(unit.anchor);
    CHECK((anchor.kind == "aten::matmul" || anchor.kind == "aten::relu"));
    CHECK(unit.ops.back() == unit.anchor);
    if (anchor.kind == "aten::matmul") CHECK(unit.ops.size() == 2);
  }
  // Only batch tensors cross: x, then y and z of each layer.
  for (const auto& tensor : units.tensors) CHECK(graph.value(tensor.value).batch_dependent);
  CHECK(units.tensors.size() == 1 + 2 * 3);
  CHECK(units.tensors.back().model_output);
}

TEST_CASE("a model without batch ops cannot be partitioned", "[units]") {
  ir::Graph graph;
  auto w = add_tensor(graph, "w", {4}, ir::ValueRole::kParam);
  auto y = add_tensor(graph, "y", {4});
  graph.add_op("aten::relu", {w}, {y});
  graph.add_model_output(y);
  ir::propagate_batch_dependence(graph);
  CHECK_THROWS_WITH(build_units(graph), Catch::Contains("nothing to partition"));
}

TEST_CASE("a batch size turned into a tensor is recomputed where it is used, not sent", "[units]") {
  // h = relu(x); n = NumToTensor(size(h, 0)); y = view(relu(h), [Int(n), -1]): traced code that
  // reads h.size(0). Sent between stages, n would carry the sender's batch to a stage whose
  // replicas run another.
  ir::Graph graph;
  auto x = add_tensor(graph, "x", {8, 16}, ir::ValueRole::kModelInput);
  auto h = add_tensor(graph, "h", {8, 16});
  graph.add_op("aten::relu", {x}, {h});
  auto zero = testing::add_literal(graph, "zero", std::int64_t{0}, ir::ValueKind::kInt);
  auto n = testing::add_literal(graph, "n", std::int64_t{8}, ir::ValueKind::kInt);
  graph.add_op("aten::size", {h, zero}, {n});
  auto n_tensor = add_tensor(graph, "n_tensor", {}, ir::ValueRole::kIntermediate, ir::DType::kInt64);
  graph.add_op("prim::NumToTensor", {n}, {n_tensor});
  auto n_int = testing::add_literal(graph, "n_int", std::int64_t{8}, ir::ValueKind::kInt);
  graph.add_op("aten::Int", {n_tensor}, {n_int});
  auto sizes = testing::add_literal(graph, "sizes", std::vector<std::int64_t>{8, -1}, ir::ValueKind::kIntList);
  graph.add_op("prim::ListConstruct", {n_int}, {sizes});
  auto r = add_tensor(graph, "r", {8, 16});
  graph.add_op("aten::relu", {h}, {r});
  auto y = add_tensor(graph, "y", {8, 16});
  graph.add_op("aten::view", {r, sizes}, {y});
  graph.add_model_output(y);
  ir::propagate_batch_dependence(graph);

  UnitGraph units = build_units(graph);
  REQUIRE(units.units.size() == 3);  // relu, relu, view: the size chain is glue
  const auto& view = units.units.back();
  CHECK(graph.op(view.anchor).kind == "aten::view");
  CHECK(view.ops.size() == 5);  // size, NumToTensor, Int, ListConstruct and the view itself
  for (const auto& tensor : units.tensors) CHECK(tensor.value != n_tensor);
}

namespace {

// A slice of `of` filled in place with a constant: the fill_ writes the slice and what it views.
void fill_slice(ir::Graph& graph, ir::ValueId of, const std::string& name) {
  auto view = add_tensor(graph, name + "_slice", {4, 16});
  graph.add_op("aten::slice", {of}, {view});
  auto filled = add_tensor(graph, name + "_filled", {4, 16});
  auto fill = graph.add_op("aten::fill_", {view}, {filled});
  for (auto written : {view, filled, of}) graph.add_write(fill, written);
}

}  // namespace

TEST_CASE("a mask built from sizes and filled in place is computed whole wherever it is read", "[units]") {
  // Swin's shifted-window mask: mask = h.new_zeros(...), fill_ on slices of it (nothing reads the
  // fills' results), then two attention ops read it. Each unit reading the mask rebuilds it, and
  // needs the fills too: left to the last unit, they filled nothing in the units reading it.
  ir::Graph graph;
  auto x = add_tensor(graph, "x", {8, 16}, ir::ValueRole::kModelInput);
  auto h = add_tensor(graph, "h", {8, 16});
  graph.add_op("aten::relu", {x}, {h});
  auto mask = add_tensor(graph, "mask", {16, 16});
  graph.add_op("aten::new_zeros", {h}, {mask});
  fill_slice(graph, mask, "top");
  fill_slice(graph, mask, "bottom");
  auto a = add_tensor(graph, "a", {8, 16});
  graph.add_op("aten::matmul", {h, mask}, {a});
  auto b = add_tensor(graph, "b", {8, 16});
  graph.add_op("aten::matmul", {a, mask}, {b});
  graph.add_model_output(b);
  ir::propagate_batch_dependence(graph);
  CHECK_FALSE(graph.value(mask).data_dependent);

  UnitGraph units = build_units(graph);
  REQUIRE(units.units.size() == 3);  // relu and the two matmuls: the mask is glue
  for (const auto& unit : {units.units[1], units.units[2]}) {
    INFO("unit of " << graph.value(graph.op(unit.anchor).outputs[0]).name);
    std::vector<std::string> kinds;
    for (auto op : unit.ops) kinds.push_back(graph.op(op).kind);
    CHECK(kinds == std::vector<std::string>{"aten::new_zeros", "aten::slice", "aten::fill_", "aten::slice",
                                            "aten::fill_", "aten::matmul"});
  }
  for (const auto& tensor : units.tensors) CHECK(tensor.value != mask);
}

TEST_CASE("a list appended to in place gives each reader the appends made before it", "[units]") {
  // DenseNet in TorchScript: features = [x]; each layer reads cat(features), then appends its
  // output. A cat must not take the appends after it, which read what it computes (a cycle).
  ir::Graph graph;
  auto x = add_tensor(graph, "x", {8, 4}, ir::ValueRole::kModelInput);
  ir::Value list_value;
  list_value.name = "features";
  list_value.kind = ir::ValueKind::kOther;
  auto features = graph.add_value(list_value);
  graph.add_op("prim::ListConstruct", {x}, {features});
  std::vector<ir::OpId> appends, cats;
  auto layer = [&](int i, std::vector<std::int64_t> shape) {
    auto joined = add_tensor(graph, "joined" + std::to_string(i), shape);
    cats.push_back(graph.add_op("aten::cat", {features}, {joined}));
    auto out = add_tensor(graph, "out" + std::to_string(i), {8, 4});
    graph.add_op("aten::linear", {joined}, {out});
    auto appended = graph.add_value(list_value);
    appends.push_back(graph.add_op("aten::append", {features, out}, {appended}));
    graph.add_write(appends.back(), features);
    return out;
  };
  layer(0, {8, 4});
  graph.add_model_output(layer(1, {8, 8}));
  ir::propagate_batch_dependence(graph);

  UnitGraph units = build_units(graph);
  auto ops_of = [&](ir::OpId anchor) { return units.units[static_cast<std::size_t>(units.unit_of_anchor[anchor])].ops; };
  auto has = [](const std::vector<ir::OpId>& ops, ir::OpId op) { return std::count(ops.begin(), ops.end(), op) > 0; };
  CHECK_FALSE(has(ops_of(cats[0]), appends[0]));
  CHECK(has(ops_of(cats[1]), appends[0]));
  CHECK_FALSE(has(ops_of(cats[1]), appends[1]));
  std::vector<double> ms(units.units.size(), 1.0);
  Blocking blocking = coarsen(graph, units, ms, 8);
  CHECK(blocking.order.size() == units.units.size());
}

TEST_CASE("a batch tensor written in place stays in one unit with its writers", "[units]") {
  // h = relu(x); h[:4].fill_(0); y = relu(h). A stage sends h as it is at its end: a cut between
  // relu and the fill_ would send h unfilled to the stage reading it.
  ir::Graph graph;
  auto x = add_tensor(graph, "x", {8, 16}, ir::ValueRole::kModelInput);
  auto h = add_tensor(graph, "h", {8, 16});
  graph.add_op("aten::relu", {x}, {h});
  fill_slice(graph, h, "head");
  auto y = add_tensor(graph, "y", {8, 16});
  graph.add_op("aten::relu", {h}, {y});
  graph.add_model_output(y);
  ir::propagate_batch_dependence(graph);

  UnitGraph units = build_units(graph);
  REQUIRE(units.units.size() == 2);  // relu, slice and fill_ together; the second relu
  CHECK(units.units[0].ops.size() == 3);
  CHECK(units.unit_of_anchor[static_cast<std::size_t>(graph.value(h).writers.front())] == 0);
}

TEST_CASE("a tensor with a dim inference left unknown stays with what reads it", "[units]") {
  // In chain(3), layer 1's relu output z1 gets an unknown dim: no cut may send it.
  ir::Graph graph = chain(3);
  ir::ValueId z1 = ir::kNoId;
  for (const auto& value : graph.values())
    if (value.name == "z1") z1 = value.id;
  REQUIRE(z1 != ir::kNoId);
  graph.value(z1).type.shape[1] = -1;
  UnitGraph units = build_units(graph);
  REQUIRE(units.units.size() == 5);  // layer 1's relu and layer 2's matmul together
  for (const auto& tensor : units.tensors) CHECK(tensor.value != z1);
  CHECK(units.unit_of_anchor[static_cast<std::size_t>(graph.value(z1).producer)] ==
        units.unit_of_anchor[static_cast<std::size_t>(graph.value(z1).consumers.front())]);
}

TEST_CASE("METIS seeding guards one part and parts of a few units", "[coarsen]") {
  std::vector<UnitEdge> edges{{0, 1, 10}, {1, 2, 10}, {2, 3, 10}};
  std::vector<double> ms{1, 1, 1, 1};
  CHECK(metis_parts(4, edges, ms, 1) == std::vector<int>{0, 0, 0, 0});
  CHECK(metis_parts(4, edges, ms, 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(metis_parts(4, edges, ms, 9) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("coarsening gives a sequence of blocks in a topological order", "[coarsen]") {
  ir::Graph graph = chain(40);
  UnitGraph units = build_units(graph);
  std::vector<double> ms(units.units.size(), 1.0);
  for (int target : {1, 5, 20, 80, 200}) {
    Blocking blocking = coarsen(graph, units, ms, target);
    INFO("target " << target);
    CHECK(blocking.count() <= std::max(target, 1));
    CHECK(blocking.count() >= std::min<int>(target, static_cast<int>(units.units.size())) / 2);
    // Every unit once, and every tensor flows forward in the sequence.
    std::vector<int> position(units.units.size(), -1);
    for (int i = 0; i < static_cast<int>(blocking.order.size()); ++i) position[blocking.order[i]] = i;
    CHECK(std::count(position.begin(), position.end(), -1) == 0);
    for (const auto& tensor : units.tensors)
      for (int consumer : tensor.consumers)
        if (tensor.producer >= 0) CHECK(position[tensor.producer] < position[consumer]);
  }
}

TEST_CASE("repeated layers come out as equal blocks", "[coarsen]") {
  ir::Graph graph = chain(40);
  UnitGraph units = build_units(graph);
  std::vector<double> ms;
  for (const auto& unit : units.units) ms.push_back(graph.op(unit.anchor).kind == "aten::matmul" ? 3.0 : 1.0);
  Blocking blocking = coarsen(graph, units, ms, 20);
  REQUIRE(blocking.count() == 20);
  for (int b = 0; b < blocking.count(); ++b) {
    INFO("block " << b);
    CHECK(blocking.end(b) - blocking.begin(b) == 4);  // two whole layers
    CHECK(graph.op(units.units[blocking.order[blocking.begin(b)]].anchor).kind == "aten::matmul");
  }
}

}  // namespace rannc::partition
