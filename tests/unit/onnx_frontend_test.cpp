// The ONNX frontend on models whose numbers or structure are hostile, and on models exported
// with a fixed batch; the planner's side of a fixed batch.
#include <catch2/catch.hpp>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <limits>

#include "frontends/onnx/onnx_frontend.h"
#include "frontends/onnx/onnx_stage_source.h"
#include "emit/stage_layout.h"
#include "partitioner/planner.h"
#include "onnx_builders.h"
#include "support/error.h"

using namespace rannc;
using namespace rannc::testing;

namespace {

void add_ints(onnx::NodeProto* node, const std::string& name, std::vector<std::int64_t> values) {
  auto* attr = node->add_attribute();
  attr->set_name(name);
  attr->set_type(onnx::AttributeProto::INTS);
  for (auto v : values) attr->add_ints(v);
}

// y = Reshape(x, [B, 2, 2]) * w with x: [B, 4]: a fixed reshape target, as a trace without
// dynamic_axes records it. `batch` is B, or a symbol.
onnx::ModelProto reshape_model(const std::string& batch) {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {batch, "4"});
  add_value_info(graph->mutable_output(), "y", {batch, "2", "2"});
  *graph->add_initializer() = int_tensor("target", {std::isdigit(static_cast<unsigned char>(batch[0])) ? std::stoll(batch) : -1, 2, 2});
  *graph->add_initializer() = float_tensor("w", {2});
  add_node(graph, "Reshape", {"x", "target"}, {"r"});
  add_node(graph, "Mul", {"r", "w"}, {"y"});
  return model;
}

// x: [batch, 3, 8, 8] -> Conv with a 4x3x3x3 weight and the given window attributes.
onnx::ModelProto conv_model(int input_hw, int kernel, const std::string& attr, std::vector<std::int64_t> values) {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  auto hw = std::to_string(input_hw);
  add_value_info(graph->mutable_input(), "x", {"batch", "3", hw, hw});
  add_value_info(graph->mutable_output(), "y", {"batch", "4", "h", "w"});
  *graph->add_initializer() = float_tensor("w", {4, 3, kernel, kernel});
  auto* conv = add_node(graph, "Conv", {"x", "w"}, {"y"}, "conv");
  if (!attr.empty()) add_ints(conv, attr, values);
  return model;
}

LoadOptions with_batch(std::int64_t batch) {
  LoadOptions options;
  options.batch = batch;
  return options;
}

}  // namespace

TEST_CASE("an ONNX model exported without dynamic axes has a fixed batch, and a symbolic one has none") {
  ModelFile fixed(reshape_model("2"));
  auto model = load_onnx(fixed.path.string(), {});
  REQUIRE(model.fixed_batch);
  CHECK(*model.fixed_batch == 2);
  CHECK(model.batch == 2);
  CHECK(load_onnx(fixed.path.string(), with_batch(8)).fixed_batch == 2);  // 4 microbatches of 2

  ModelFile symbolic(reshape_model("batch"));
  CHECK_FALSE(load_onnx(symbolic.path.string(), with_batch(8)).fixed_batch);
}

TEST_CASE("a --batch or --input that a fixed ONNX batch cannot run is refused with the export advice") {
  ModelFile fixed(reshape_model("2"));
  auto message = input_error([&] { load_onnx(fixed.path.string(), with_batch(3)); });
  CHECK_THAT(message, Catch::StartsWith("--batch 3: " + fixed.path.string() + " was exported with a fixed batch of 2"));
  CHECK_THAT(message, Catch::Contains("export with dynamic_axes={'x': {0: 'batch'}}"));
  LoadOptions options;
  options.inputs.push_back({"x", {8, 4}, ir::DType::kFloat32});
  message = input_error([&] { load_onnx(fixed.path.string(), options); });
  CHECK_THAT(message, Catch::Contains("--input 'x' has batch 8 but the model was exported with a fixed batch of 2"));
}

TEST_CASE("fixed batches beyond what a plan holds, and dims whose sizes overflow, are one-line input errors") {
  for (const auto* batch : {"1099511627776", "9223372036854775807"}) {
    auto model = reshape_model(batch);
    ModelFile huge(model);
    auto message = input_error([&] { load_onnx(huge.path.string(), {}); });
    INFO(message);
    CHECK_THAT(message, Catch::Contains("fixed batch of " + std::string(batch) + ", larger than a plan supports"));
  }
  // A symbolic batch with a huge fixed feature dim: the element count overflows int64.
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"batch", "9223372036854775807"});
  add_value_info(graph->mutable_output(), "y", {"batch", "9223372036854775807"});
  add_node(graph, "Relu", {"x"}, {"y"});
  ModelFile file(model);
  auto message = input_error([&] { load_onnx(file.path.string(), with_batch(2)); });
  CHECK_THAT(message, Catch::Contains("input 'x' has dims 2x9223372036854775807: its element count overflows"));
  message = input_error([&] { load_onnx(file.path.string(), with_batch(std::int64_t{1} << 40)); });
  CHECK_THAT(message, Catch::Contains("input 'x' has dims"));
}

TEST_CASE("convolution windows that shape inference would divide by zero or run past are refused first") {
  struct Case {
    int input_hw, kernel;
    std::string attr;
    std::vector<std::int64_t> values;
    std::string says;
  };
  for (const auto& c : std::vector<Case>{{8, 3, "strides", {0, 0}, "has strides 0: must be positive"},
                                         {8, 3, "dilations", {1, 0}, "has dilations 0: must be positive"},
                                         {8, 3, "pads", {0, -2, 0, 0}, "has pads -2: must not be negative"},
                                         {8, 3, "kernel_shape", {0, 3}, "has kernel_shape 0: must be positive"},
                                         {3, 5, "", {}, "its kernel spans 5 along spatial dim 0 but its padded input only 3"},
                                         {8, 3, "dilations", {4, 4}, "its kernel spans 9"}}) {
    ModelFile file(conv_model(c.input_hw, c.kernel, c.attr, c.values));
    auto message = input_error([&] { load_onnx(file.path.string(), {}); });
    INFO(message);
    CHECK_THAT(message, Catch::StartsWith(file.path.string() + ": node 'conv' (Conv)"));
    CHECK_THAT(message, Catch::Contains(c.says));
  }
  ModelFile fits(conv_model(3, 5, "pads", {1, 1, 1, 1}));  // padded to 5: a 1x1 output
  CHECK(load_onnx(fits.path.string(), {}).graph.ops().size() == 1);
}

TEST_CASE("model-local functions that call themselves, directly or through each other, are refused") {
  for (bool mutual : {false, true}) {
    auto model = empty_model();
    auto* local = model.add_opset_import();
    local->set_domain("local");
    local->set_version(1);
    std::vector<std::pair<std::string, std::string>> calls =
        mutual ? std::vector<std::pair<std::string, std::string>>{{"F", "G"}, {"G", "F"}}
               : std::vector<std::pair<std::string, std::string>>{{"F", "F"}};
    for (const auto& [name, callee] : calls) {
      auto* function = model.add_functions();
      function->set_name(name);
      function->set_domain("local");
      function->add_input("a");
      function->add_output("b");
      *function->add_opset_import() = model.opset_import(0);
      *function->add_opset_import() = *local;
      auto* relu = function->add_node();
      relu->set_op_type("Relu");
      relu->add_input("a");
      relu->add_output("r");
      auto* call = function->add_node();
      call->set_op_type(callee);
      call->set_domain("local");
      call->add_input("r");
      call->add_output("b");
    }
    auto* graph = model.mutable_graph();
    add_value_info(graph->mutable_input(), "x", {"batch", "8"});
    add_value_info(graph->mutable_output(), "y", {"batch", "8"});
    add_node(graph, "F", {"x"}, {"y"}, "call")->set_domain("local");
    ModelFile file(model);
    auto message = input_error([&] { load_onnx(file.path.string(), {}); });
    INFO(message);
    CHECK_THAT(message, Catch::Contains(mutual ? "function 'local::F' calls itself (local::F -> local::G -> local::F)"
                                               : "function 'local::F' calls itself (local::F -> local::F)"));
  }
}

TEST_CASE("a Sum of thousands of inputs is flat TorchScript, not calls nested thousands deep") {
  auto model = empty_model();
  auto* graph = model.mutable_graph();
  add_value_info(graph->mutable_input(), "x", {"batch", "4"});
  add_value_info(graph->mutable_output(), "y", {"batch", "4"});
  add_node(graph, "Sum", std::vector<std::string>(5000, "x"), {"y"});
  ModelFile file(model);
  auto loaded = load_onnx(file.path.string(), {});
  auto layout = emit::whole_model_layout(loaded.graph);
  const auto& proto = static_cast<const OnnxModelSource&>(*loaded.source).proto();
  auto source = onnx_stage_source(loaded.path, proto, loaded.graph, layout);
  int depth = 0, deepest = 0;
  for (char c : source.forward) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    deepest = std::max(deepest, depth);
  }
  CHECK(deepest <= 3);
  CHECK_THAT(source.forward, Catch::Contains("_a0 = torch.add(_a0, v_x)"));
}

TEST_CASE("a fixed batch makes every config run microbatches of it with one replica per stage") {
  partition::PlanRequest request;
  request.cluster.nodes = 1;
  request.cluster.gpus_per_node = 8;
  request.global_batch = 32;
  request.fixed_microbatch = 2;
  auto configs = partition::candidate_configs(request, 16);
  REQUIRE_FALSE(configs.empty());
  bool pipelines = false;
  for (const auto& config : configs) {
    CHECK(config.microbatch_size == 2);
    CHECK(config.replica_samples == 2);
    pipelines = pipelines || config.pipelines > 1;
  }
  CHECK(pipelines);  // data parallelism stays open: across pipelines
  request.fixed_microbatch.reset();
  auto free_configs = partition::candidate_configs(request, 16);
  CHECK(free_configs.size() > configs.size());
}
