// Module paths of ops: read from what the exporters leave (ONNX node names, torch.export's
// nn_module_stack), kept once per path in the graph, named per stage as blocks and ranges, in
// the IR dumps, plan.json and show's ops column.
#include <catch2/catch.hpp>

#include "compiler/show.h"
#include "graph_builders.h"
#include "ir/dump.h"
#include "ir/module_path.h"
#include "plan/plan_json.h"
#include "plan_fixture.h"

using namespace rannc;
using namespace rannc::ir;
using rannc::testing::add_tensor;

TEST_CASE("module paths from torch.onnx.export node names") {
  CHECK(module_path_from_onnx_name("/layers.0/self_attn/MatMul") == "layers.0.self_attn");
  CHECK(module_path_from_onnx_name("/encoder/layers.3/norm1/LayerNormalization_1") == "encoder.layers.3.norm1");
  CHECK(module_path_from_onnx_name("/embed/Gather") == "embed");
  // Scopes are named by the last non-numeric atom of the module's name and the numbers after it:
  // a Sequential's children repeat the Sequential's name.
  CHECK(module_path_from_onnx_name("/layers/layers.0/Gemm") == "layers.0");
  CHECK(module_path_from_onnx_name("/features/features.0/features.0.1/Conv") == "features.0.1");
  CHECK(module_path_from_onnx_name("/0/Gemm") == "0");  // a Sequential model's child
  CHECK(module_path_from_onnx_name("/layer1/layer1.0/conv1/Conv") == "layer1.0.conv1");
  CHECK(module_path_from_onnx_name("/layers/layers_extra/Gemm") == "layers.layers_extra");
  CHECK(module_path_from_onnx_name("/MatMul") == "");  // the model's own op
  CHECK(module_path_from_onnx_name("MatMul_12") == "");
  CHECK(module_path_from_onnx_name("onnx::Unsqueeze_112") == "");
  CHECK(module_path_from_onnx_name("") == "");
  CHECK(module_path_from_onnx_name("/") == "");
  CHECK(module_path_from_onnx_name("/a b/MatMul") == "");  // not a module's name
}

TEST_CASE("module paths from torch.export's nn_module_stack") {
  CHECK(module_path_from_nn_module_stack("L__self__,,__main__.M;L__self___layers_0,layers.0,torch.nn.modules.linear.Linear") ==
        "layers.0");
  CHECK(module_path_from_nn_module_stack(
            "L__self__,,M;L__self___layers_1,layers.1,Block;L__self___layers_1_attn,layers.1.attn,Attention") ==
        "layers.1.attn");
  CHECK(module_path_from_nn_module_stack("L__self__,,__main__.TinyAttention") == "");
  CHECK(module_path_from_nn_module_stack("_empty_nn_module_stack_from_metadata_hook,_empty_nn_module_stack_from_metadata_hook,"
                                         "_empty_nn_module_stack_from_metadata_hook") == "");
  CHECK(module_path_from_nn_module_stack("") == "");
  CHECK(module_path_from_nn_module_stack("garbage") == "");
}

TEST_CASE("a module path's block ends at its first numbered component") {
  CHECK(module_block("layers.3.self_attn.out_proj") == "layers.3");
  CHECK(module_block("encoder.layers.3") == "encoder.layers.3");
  CHECK(module_block("layer1.0.conv1") == "layer1.0");  // torchvision ResNet
  CHECK(module_block("encoder.layers.encoder_layer_7.mlp") == "encoder.layers.encoder_layer_7");  // torchvision ViT
  CHECK(module_block("embed.norm") == "embed");
  CHECK(module_block("head") == "head");
  CHECK(module_block("conv1") == "conv1");
}

TEST_CASE("a stage's blocks read as ranges of numbered siblings") {
  CHECK(modules_summary({"embed", "layers.0", "layers.1", "layers.2", "head"}) == "embed, layers.0-2, head");
  CHECK(modules_summary({"layers.3"}) == "layers.3");
  CHECK(modules_summary({"layers.0", "layers.1", "layers.3", "layers.4"}) == "layers.0-1, layers.3-4");
  CHECK(modules_summary({"layer1.0", "layer1.1", "layer2.0"}) == "layer1.0-1, layer2.0");
  CHECK(modules_summary({"a.encoder_layer_0", "a.encoder_layer_1"}) == "a.encoder_layer_0-1");
  CHECK(modules_summary({"layers.08", "layers.09"}) == "layers.08, layers.09");  // a range could not give "08" back
  CHECK(modules_summary({}) == "");
  auto cut = modules_summary({"embeddings", "encoder.layer.0", "encoder.layer.1", "pooler", "classifier_with_a_long_name"});
  CHECK(cut.size() == 40);
  CHECK(cut == "embeddings, encoder.layer.0-1, pooler...");
  // Thousands of blocks: one range, and the summary stops early when it is long anyway.
  std::vector<std::string> many;
  for (int i = 0; i < 5000; ++i) many.push_back("h." + std::to_string(i));
  CHECK(modules_summary(many) == "h.0-4999");
  many.insert(many.begin() + 1, "x");
  CHECK(modules_summary(many, 20) == "h.0, x, h.1-4999");
}

TEST_CASE("a graph keeps each module path once and names a stage's blocks in op order") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  std::vector<OpId> ops;
  ValueId last = x;
  const char* paths[] = {"embed", "layers.0.fc1", "layers.0.fc2", "", "layers.1.fc1", "layers.0.fc1", "head"};
  for (const char* path : paths) {
    auto y = add_tensor(g, "y" + std::to_string(ops.size()), {4, 8});
    ops.push_back(g.add_op("aten::relu", {last}, {y}));
    g.set_module_path(ops.back(), path);
    last = y;
  }
  g.add_model_output(last);
  CHECK(g.module_paths().size() == 5);
  CHECK(g.op(ops[1]).module == g.op(ops[5]).module);
  CHECK(g.module_path(ops[2]) == "layers.0.fc2");
  CHECK(g.module_path(ops[3]) == "");
  CHECK(g.op(ops[3]).module == kNoId);
  CHECK(module_blocks(g, ops) == std::vector<std::string>{"embed", "layers.0", "layers.1", "head"});
  CHECK(module_blocks(g, {ops[3]}).empty());

  auto text = graph_to_text(g);
  CHECK(text.find("%y1 = aten::relu(%y0) : float32[4,8]  # layers.0.fc1\n") != std::string::npos);
  CHECK(text.find("%y3 = aten::relu(%y2) : float32[4,8]\n") != std::string::npos);
  auto json = graph_to_json(g);
  CHECK(json["ops"][1]["module"] == "layers.0.fc1");
  CHECK(!json["ops"][3].contains("module"));
}

TEST_CASE("show's ops column names a stage's modules when plan.json has them") {
  auto document = test::small_plan();
  document["stages"][0]["ops"] = {0, 1, 2, 3, 4};
  document["stages"][0]["modules"] = {"embed", "layers.0", "layers.1"};
  auto plan = plan::from_json(document, "plan.json");
  CHECK(plan.stages[0].modules == std::vector<std::string>{"embed", "layers.0", "layers.1"});
  CHECK(plan.stages[1].modules.empty());
  auto written = plan::to_json(plan);
  CHECK(written["stages"][0]["modules"] == document["stages"][0]["modules"]);
  CHECK(!written["stages"][1].contains("modules"));  // old plans and unknown modules: no field

  auto text = show_text(plan);
  CHECK(text.find("embed, layers.0-1 (5 ops)\n") != std::string::npos);
  CHECK(text.find("aten::linear y .. aten::linear y\n") != std::string::npos);  // stage 1 as before
  CHECK(text.find("aten::linear h .. aten::relu a") == std::string::npos);
  CHECK(show_json(plan)["stages"][0]["modules"] == document["stages"][0]["modules"]);
}
