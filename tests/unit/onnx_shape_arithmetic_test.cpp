#include <catch2/catch.hpp>

#include <map>

#include "frontends/onnx/onnx_shape_arithmetic.h"

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

TEST_CASE("PyTorch's F.pad export folds: its pads reversed by Reshape, Slice with step -1 and Transpose") {
  // F.pad's (1, 2, 0, 1): the last dim 1 before, 2 after, the one before it 0 and 1; ONNX wants
  // every dim's begin, then every end: [0, 0, 0, 1, 0, 0, 1, 2]
  onnx::GraphProto graph;
  add_int_initializer(graph, "torch_pads", {1, 2, 0, 1, 0, 0, 0, 0});
  add_int_initializer(graph, "pairs", {-1, 2});
  add_int_initializer(graph, "minus_one", {-1});
  add_int_initializer(graph, "before_first", {-INT64_MAX});
  add_int_initializer(graph, "zero", {0});
  add_int_initializer(graph, "flat", {-1});
  add_node(graph, "Reshape", {"torch_pads", "pairs"}, "paired");
  add_node(graph, "Slice", {"paired", "minus_one", "before_first", "zero", "minus_one"}, "reversed");
  auto* transpose = add_node(graph, "Transpose", {"reversed"}, "transposed");
  auto* perm = transpose->add_attribute();
  perm->set_name("perm");
  perm->add_ints(1);
  perm->add_ints(0);
  add_node(graph, "Reshape", {"transposed", "flat"}, "pads");
  CHECK(fold_shape_arithmetic(graph, types_for(graph, {1})));
  CHECK(constant_values(graph.node(3)) == std::vector<std::int64_t>{0, 0, 0, 1, 0, 0, 1, 2});
}

namespace {

onnx::ModelProto model_of_opset(int opset) {
  onnx::ModelProto model;
  model.set_ir_version(10);
  auto* import = model.add_opset_import();
  import->set_domain("");
  import->set_version(opset);
  return model;
}

onnx::TypeProto float_type(std::vector<std::int64_t> dims) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (auto d : dims) type.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  return type;
}

std::vector<std::int64_t> dims_of(const onnx::TypeProto& type) {
  std::vector<std::int64_t> dims;
  for (const auto& dim : type.tensor_type().shape().dim()) dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  return dims;
}

}  // namespace

TEST_CASE("a newer model is lowered to opset 17 for the library's inference") {
  auto model = model_of_opset(23);
  auto& graph = *model.mutable_graph();
  add_int_initializer(graph, "axes", {-1});
  add_node(graph, "ReduceMean", {"x", "axes"}, "mean");
  add_node(graph, "Gelu", {"mean"}, "gelu");
  auto lowered = lower_for_library(model, {});
  CHECK(lowered.model.opset_import(0).version() == 17);
  CHECK(lowered.model.ir_version() == 8);
  const auto& reduce = lowered.model.graph().node(0);
  CHECK(reduce.input_size() == 1);  // axes became the opset-13 attribute
  REQUIRE(reduce.attribute_size() == 1);
  CHECK(reduce.attribute(0).name() == "axes");
  CHECK(reduce.attribute(0).ints(0) == -1);
  CHECK(lowered.model.graph().node(1).op_type() == "Identity");  // Gelu keeps its input's type
  CHECK(lowered.complete);
}

TEST_CASE("Attention's outputs are typed from Q, K, V and the past, 3-D with grouped heads") {
  auto model = model_of_opset(23);
  auto* node = add_node(*model.mutable_graph(), "Attention", {"q", "k", "v", "", "past_key", "past_value"}, "y");
  node->add_output("present_key");
  node->add_output("present_value");
  node->add_output("qk");
  for (auto [name, value] : {std::pair{"q_num_heads", 8}, std::pair{"kv_num_heads", 2}}) {
    auto* attr = node->add_attribute();
    attr->set_name(name);
    attr->set_type(onnx::AttributeProto::INT);
    attr->set_i(value);
  }
  OnnxTypeMap types = {{"q", float_type({3, 5, 64})}, {"k", float_type({3, 5, 16})}, {"v", float_type({3, 5, 24})},
                       {"past_key", float_type({3, 2, 7, 8})}, {"past_value", float_type({3, 2, 7, 12})}};
  CHECK_FALSE(lower_for_library(model, {}).complete);  // no types to start from: a later round
  auto lowered = lower_for_library(model, types);
  CHECK(lowered.complete);
  CHECK(lowered.typed == 4);
  CHECK(lowered.model.graph().node_size() == 0);
  std::map<std::string, std::vector<std::int64_t>> dims;
  for (const auto& info : lowered.model.graph().value_info()) dims[info.name()] = dims_of(info.type());
  CHECK(dims["y"] == std::vector<std::int64_t>{3, 5, 8 * 12});
  CHECK(dims["present_key"] == std::vector<std::int64_t>{3, 2, 12, 8});
  CHECK(dims["present_value"] == std::vector<std::int64_t>{3, 2, 12, 12});
  CHECK(dims["qk"] == std::vector<std::int64_t>{3, 8, 5, 12});
}
