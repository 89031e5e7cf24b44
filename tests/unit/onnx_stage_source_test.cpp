#include <catch2/catch.hpp>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>

#include "compiler/input_spec.h"
#include "frontends/onnx/onnx_frontend.h"
#include "frontends/onnx/onnx_stage_source.h"
#include "emit/stage_layout.h"
#include "onnx_builders.h"
#include "partitioner/tensor_regions.h"
#include "support/error.h"

using namespace rannc;
using namespace rannc::testing;
using onnx::TensorProto;

namespace {

// A Constant node holding `tensor` in its "value" attribute.
onnx::NodeProto* add_constant(onnx::GraphProto* graph, const std::string& output, const TensorProto& tensor) {
  auto* node = add_node(graph, "Constant", {}, {output});
  auto* value = node->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = tensor;
  return node;
}

void add_int_attr(onnx::NodeProto* node, const std::string& name, std::int64_t value) {
  auto* attr = node->add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INT);
  attr->set_i(value);
}

// nn.Linear as exported: Gemm(input, <name>.weight [out, in], <name>.bias [out], transB=1).
void add_linear(onnx::GraphProto* graph, const std::string& name, const std::string& input, const std::string& output,
                std::int64_t in, std::int64_t out) {
  *graph->add_initializer() = float_tensor(name + ".weight", {out, in});
  *graph->add_initializer() = float_tensor(name + ".bias", {out});
  add_int_attr(add_node(graph, "Gemm", {input, name + ".weight", name + ".bias"}, {output}), "transB", 1);
}

// y = Relu(Gemm(x, W, B, transB=1)), x: [batch, 4], W: [3, 4].
onnx::ModelProto tiny_mlp() {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"batch", "4"});
  add_value_info(graph->mutable_output(), "y", {"batch", "3"});
  add_linear(graph, "fc", "x", "onnx::Relu_7", 4, 3);
  add_node(graph, "Relu", {"onnx::Relu_7"}, {"y"});
  return model;
}

// y = Gemm(Relu(Gemm(x, W1, B1, transB=1)), W2, B2, transB=1), x: [2, 4], W1: [6, 4], W2: [4, 6]:
// a column-parallel Gemm and a row-parallel one with its bias.
onnx::ModelProto two_layer_mlp() {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"2", "4"});
  add_value_info(graph->mutable_output(), "y", {"2", "4"});
  add_linear(graph, "fc1", "x", "h", 4, 6);
  add_node(graph, "Relu", {"h"}, {"r"});
  add_linear(graph, "fc2", "r", "y", 6, 4);
  return model;
}

float element(const StageAttribute& attribute, std::size_t i) {
  float value;
  std::memcpy(&value, attribute.data.data() + i * sizeof(float), sizeof(float));
  return value;
}

struct Stage {
  Model model;
  emit::StageLayout layout;
  const onnx::ModelProto& proto() const { return static_cast<const OnnxModelSource&>(*model.source).proto(); }
  StageSource source() const { return onnx_stage_source(model.path, proto(), model.graph, layout); }
};

Stage whole_model(const ModelFile& file) {
  Stage stage{load_onnx(file.path.string(), {}), {}};
  stage.layout = emit::whole_model_layout(stage.model.graph);
  return stage;
}

}  // namespace

TEST_CASE("an ONNX stage is a forward method over its inputs that returns a tuple and reads self weights") {
  ModelFile file(tiny_mlp());
  auto stage = whole_model(file);
  auto source = stage.source();
  CHECK_THAT(source.forward, Catch::StartsWith("def forward(self, v_x: Tensor) -> Tuple[Tensor]:\n"));
  CHECK_THAT(source.forward, Catch::Contains("    v_onnx__Relu_7 = torch.addmm(self.p1, v_x, torch.t(self.p0))\n"));
  CHECK_THAT(source.forward, Catch::Contains("    v_y = torch.relu(v_onnx__Relu_7)\n"));
  CHECK_THAT(source.forward, Catch::EndsWith("    return (v_y,)\n"));

  REQUIRE(source.attributes.size() == 2);
  const auto& weight = source.attributes[0];
  CHECK(weight.stage_name == "p0");
  CHECK(weight.trainable);
  CHECK(weight.dtype == ir::DType::kFloat32);
  CHECK(weight.dims == std::vector<std::int64_t>{3, 4});
  REQUIRE(weight.data.size() == 12 * sizeof(float));
  float last;
  std::memcpy(&last, weight.data.data() + 11 * sizeof(float), sizeof last);
  CHECK(last == 5.5f);  // read from float_data, not raw_data
  CHECK(source.attributes[1].dims == std::vector<std::int64_t>{3});
}

TEST_CASE("ONNX stage sources are deterministic") {
  ModelFile file(tiny_mlp());
  auto first = whole_model(file).source();
  auto second = whole_model(file).source();
  CHECK(first.forward == second.forward);
  REQUIRE(first.attributes.size() == second.attributes.size());
  for (std::size_t i = 0; i < first.attributes.size(); ++i) CHECK(first.attributes[i].data == second.attributes[i].data);
}

TEST_CASE("shapes are computed at run time, so a stage follows the microbatch size") {
  // y = Reshape(x, Concat(Shape(x)[0], [-1])) / 2, x: [batch, 2, 3]: the export pattern of x.view(b, -1).
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"batch", "2", "3"});
  add_value_info(graph->mutable_output(), "y", {"batch", "6"});
  add_value_info(graph->mutable_output(), "n", {}, TensorProto::INT64);
  *graph->add_initializer() = int_tensor("zero", {0}, /*scalar=*/true);
  *graph->add_initializer() = int_tensor("axes", {0});
  *graph->add_initializer() = int_tensor("rest", {-1});
  add_node(graph, "Shape", {"x"}, {"shape"});
  add_node(graph, "Gather", {"shape", "zero"}, {"b"});
  add_node(graph, "Unsqueeze", {"b", "axes"}, {"b1"});
  add_int_attr(add_node(graph, "Concat", {"b1", "rest"}, {"target"}), "axis", 0);
  add_node(graph, "Reshape", {"x", "target"}, {"flat"});
  add_constant(graph, "two", int_tensor("", {2}, /*scalar=*/true));
  add_node(graph, "Div", {"b", "two"}, {"n"});
  auto* scale = graph->add_initializer();
  *scale = float_tensor("half", {});
  scale->set_float_data(0, 0.1f);
  add_node(graph, "Mul", {"flat", "half"}, {"y"});
  ModelFile file(model);
  auto source = whole_model(file).source();
  INFO(source.forward);
  CHECK_THAT(source.forward, Catch::Contains("v_shape = torch.tensor(v_x.size(), dtype=4)"));
  CHECK_THAT(source.forward, Catch::Contains("v_b = torch.select(v_shape, 0, 0)"));
  CHECK_THAT(source.forward, Catch::Contains("v_b1 = torch.unsqueeze(v_b, 0)"));
  CHECK_THAT(source.forward, Catch::Contains("List[int] = v_target.tolist()"));
  CHECK_THAT(source.forward, Catch::Contains("v_two = torch.tensor(2, dtype=4)"));
  CHECK_THAT(source.forward, Catch::Contains("v_n = torch.div(v_b, v_two, rounding_mode=\"trunc\")"));
  CHECK_THAT(source.forward, Catch::Contains("v_y = torch.mul(v_flat, self.p0)"));
  CHECK_THAT(source.forward, Catch::Contains("-> Tuple[Tensor, Tensor]:"));
  CHECK_THAT(source.forward, Catch::Contains("return (v_n, v_y)") || Catch::Contains("return (v_y, v_n)"));
  CHECK_THAT(source.forward, !Catch::Contains("[2, 6]"));  // no shape baked from the export batch
}

TEST_CASE("large ONNX constants become c buffers, and small float ones stay inline in shortest form") {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"batch", "40"});
  add_value_info(graph->mutable_output(), "y", {"batch", "40"});
  add_constant(graph, "table", float_tensor("", {40}));
  auto* eps = add_node(graph, "Constant", {}, {"eps"});
  auto* f = eps->add_attribute();
  f->set_name("value_float");
  f->set_type(onnx::AttributeProto::FLOAT);
  f->set_f(1e-5f);
  add_node(graph, "Add", {"x", "table"}, {"sum"});
  add_node(graph, "Sub", {"sum", "eps"}, {"y"});
  ModelFile file(model);
  auto source = whole_model(file).source();
  INFO(source.forward);
  CHECK_THAT(source.forward, Catch::Contains("v_table = self.c0"));
  CHECK_THAT(source.forward, Catch::Contains("v_eps = torch.tensor(1e-05, dtype=6)"));
  REQUIRE(source.attributes.size() == 1);
  CHECK(source.attributes[0].stage_name == "c0");
  CHECK_FALSE(source.attributes[0].trainable);
  CHECK(source.attributes[0].data.size() == 40 * sizeof(float));
}

TEST_CASE("an ONNX op without a mapping is an error naming the model, the op and the node") {
  // The IR as the frontend builds it from a Loop node (the body is irrelevant here).
  auto model = empty_model();
  add_node(model.mutable_graph(), "Loop", {"trip", "", "state"}, {"out"}, "/tables.0/Loop");
  ir::Graph graph;
  auto value = [&](const std::string& name, ir::ValueRole role = ir::ValueRole::kIntermediate) {
    ir::Value v;
    v.name = name;
    v.role = role;
    v.type.rank_known = false;
    return graph.add_value(v);
  };
  auto trip = value("trip", ir::ValueRole::kModelInput), state = value("state", ir::ValueRole::kModelInput);
  ir::Value none;
  none.kind = ir::ValueKind::kNone;
  auto absent = graph.add_value(none);
  auto out = value("out");
  graph.add_op("onnx::Loop", {trip, absent, state}, {out}, 0);
  graph.add_model_output(out);
  auto layout = emit::whole_model_layout(graph);
  auto message = input_error([&] { onnx_stage_source("models/dlrm.onnx", model, graph, layout); });
  CHECK_THAT(message, Catch::StartsWith("models/dlrm.onnx: "));
  CHECK_THAT(message, Catch::Contains("'Loop'"));
  CHECK_THAT(message, Catch::Contains("/tables.0/Loop"));
  CHECK_THAT(message, Catch::Contains("--plan-only"));
}

TEST_CASE("weights in an external file that is not there are an error that says to plan only") {
  auto model = tiny_mlp();
  auto* weight = model.mutable_graph()->mutable_initializer(0);
  weight->clear_float_data();
  weight->set_data_location(TensorProto::EXTERNAL);
  auto* location = weight->add_external_data();
  location->set_key("location");
  location->set_value("weights.bin");
  ModelFile file(model);
  auto stage = whole_model(file);
  auto message = input_error([&] { stage.source(); });
  CHECK_THAT(message, Catch::StartsWith(file.path.string() + ": "));
  CHECK_THAT(message, Catch::Contains("'fc.weight'") && Catch::Contains("weights.bin"));
  CHECK_THAT(message, Catch::Contains("--plan-only"));

  // Beside the model, the file is read.
  std::vector<float> data(12, 2.0f);
  std::ofstream(file.dir / "weights.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  auto source = stage.source();
  REQUIRE(source.attributes[0].data.size() == 48);
  CHECK(std::memcmp(source.attributes[0].data.data(), data.data(), 48) == 0);
}

TEST_CASE("a weight the stage reads but its layout lacks is an internal error") {
  ModelFile file(tiny_mlp());
  auto stage = whole_model(file);
  stage.layout.params.pop_back();
  CHECK_THROWS_AS(stage.source(), std::logic_error);
}

TEST_CASE("an ONNX stage cut for a tensor rank holds its slices and sums the row op's partial products") {
  ModelFile file(two_layer_mlp());
  auto stage = whole_model(file);
  auto regions = partition::find_tensor_regions(stage.model.graph);
  REQUIRE(regions.regions.size() == 1);
  stage.layout.tensor_shard = {2, regions.regions, {}, {"stage_0_tp0.pt", "stage_0_tp1.pt"}};
  auto source = onnx_stage_source(stage.model.path, stage.proto(), stage.model.graph, stage.layout, 1);

  // The column op reads x through tp_copy; the row op's product is summed, then its bias added once.
  CHECK_THAT(source.forward, Catch::Contains(" = torch.ops.rannc.tp_copy(v_x)\n"));
  CHECK_THAT(source.forward, Catch::Contains("    v_y = torch.mm(v_r, torch.t(self.p2))\n"));
  CHECK_THAT(source.forward, Catch::Contains(" = torch.ops.rannc.tp_reduce(v_y)\n"));
  CHECK_THAT(source.forward, Catch::Contains(", self.p3)\n"));
  REQUIRE(source.attributes.size() == 4);
  // Rank 1's rows 3..5 of fc1 (element i of a weight is i / 2) and of its bias; columns 3..5 of fc2.
  const auto& fc1 = source.attributes[0];
  CHECK(fc1.dims == std::vector<std::int64_t>{3, 4});
  CHECK(element(fc1, 0) == 0.5f * 12);
  CHECK(source.attributes[1].dims == std::vector<std::int64_t>{3});
  CHECK(element(source.attributes[1], 0) == 0.5f * 3);
  const auto& fc2 = source.attributes[2];
  CHECK(fc2.dims == std::vector<std::int64_t>{4, 3});
  CHECK(element(fc2, 0) == 0.5f * 3);
  CHECK(element(fc2, 3) == 0.5f * 9);
  CHECK(source.attributes[3].dims == std::vector<std::int64_t>{4});  // the row op's bias: whole
}
