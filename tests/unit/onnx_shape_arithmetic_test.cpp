#include <catch2/catch.hpp>

#include "compiler/onnx_shape_arithmetic.h"

using namespace rannc;

namespace {

onnx::NodeProto* add_node(onnx::GraphProto& graph, const std::string& op, std::vector<std::string> inputs,
                          const std::string& output) {
  auto* node = graph.add_node();
  node->set_op_type(op);
  for (const auto& input : inputs) node->add_input(input);
  node->add_output(output);
  return node;
}

void add_int_initializer(onnx::GraphProto& graph, const std::string& name, std::vector<std::int64_t> values,
                         bool scalar = false) {
  auto* tensor = graph.add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(onnx::TensorProto::INT64);
  if (!scalar) tensor->add_dims(static_cast<std::int64_t>(values.size()));
  for (auto v : values) tensor->add_int64_data(v);
}

// Types as shape inference gives them: x with its dims, every other value int64.
OnnxTypeMap types_for(const onnx::GraphProto& graph, std::vector<std::int64_t> x_dims) {
  OnnxTypeMap types;
  for (const auto& node : graph.node()) {
    for (const auto& name : node.output()) types[name].mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
  }
  auto& x = types["x"];
  x.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (auto d : x_dims) x.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  return types;
}

std::vector<std::int64_t> constant_values(const onnx::NodeProto& node) {
  REQUIRE(node.op_type() == "Constant");
  const auto& t = node.attribute(0).t();
  return {t.int64_data().begin(), t.int64_data().end()};
}

}  // namespace

TEST_CASE("a channel-shuffle reshape target folds to a constant") {
  // target = Concat(Unsqueeze(Shape(x)[0]), [2], Unsqueeze(Shape(x)[1] / 2), [-1]) for x.view(b, 2, c // 2, -1)
  onnx::GraphProto graph;
  add_int_initializer(graph, "zero", {0}, /*scalar=*/true);
  add_int_initializer(graph, "one", {1}, /*scalar=*/true);
  add_int_initializer(graph, "two", {2}, /*scalar=*/true);
  add_int_initializer(graph, "axes", {0});
  add_int_initializer(graph, "groups", {2});
  add_int_initializer(graph, "rest", {-1});
  add_node(graph, "Shape", {"x"}, "shape");
  auto* gather_b = add_node(graph, "Gather", {"shape", "zero"}, "b");
  gather_b->add_attribute()->set_name("axis");
  add_node(graph, "Gather", {"shape", "one"}, "c");
  add_node(graph, "Div", {"c", "two"}, "c_half");
  add_node(graph, "Unsqueeze", {"b", "axes"}, "b1");
  add_node(graph, "Unsqueeze", {"c_half", "axes"}, "c1");
  add_node(graph, "Concat", {"b1", "groups", "c1", "rest"}, "target");
  add_node(graph, "Reshape", {"x", "target"}, "y");

  CHECK(fold_shape_arithmetic(graph, types_for(graph, {8, 116, 28, 28})));
  CHECK(constant_values(graph.node(0)) == std::vector<std::int64_t>{8, 116, 28, 28});
  CHECK(constant_values(graph.node(3)) == std::vector<std::int64_t>{58});
  CHECK(constant_values(graph.node(6)) == std::vector<std::int64_t>{8, 2, 58, -1});
  CHECK(graph.node(7).op_type() == "Reshape");  // tensor ops are never folded
}

TEST_CASE("nothing folds while the shape it starts from is unknown") {
  onnx::GraphProto graph;
  add_int_initializer(graph, "zero", {0}, /*scalar=*/true);
  add_node(graph, "Shape", {"x"}, "shape");
  add_node(graph, "Gather", {"shape", "zero"}, "b");
  onnx::TypeProto unknown;
  unknown.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  unknown.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("batch");
  CHECK_FALSE(fold_shape_arithmetic(graph, {{"x", unknown}}));
  CHECK(graph.node(0).op_type() == "Shape");
}

TEST_CASE("malformed shape arithmetic is left alone, never folded out of range") {
  onnx::GraphProto graph;
  add_int_initializer(graph, "empty", {});  // dims [0]
  add_int_initializer(graph, "one", {1}, /*scalar=*/true);
  add_int_initializer(graph, "far_axis", {-10});
  add_int_initializer(graph, "huge_index", {INT64_MAX}, /*scalar=*/true);
  add_int_initializer(graph, "vec", {4, 5});
  add_node(graph, "Add", {"empty", "one"}, "sum");
  add_node(graph, "Unsqueeze", {"vec", "far_axis"}, "unsqueezed");
  add_node(graph, "Gather", {"vec", "huge_index"}, "picked");
  add_node(graph, "Unsqueeze", {"vec", "unknown_axes"}, "unknown");
  CHECK_FALSE(fold_shape_arithmetic(graph, types_for(graph, {1})));
}
