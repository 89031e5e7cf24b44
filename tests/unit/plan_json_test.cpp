// plan.json written and read back: a valid plan gives every field; each malformed plan gives one line
// that names the file and the field.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

#include "compiler/show.h"
#include "plan/plan_json.h"
#include "plan_fixture.h"
#include "support/error.h"
#include "support/sha256.h"

using namespace rannc;
using namespace rannc::plan;
using nlohmann::json;

namespace {

// A folder of its own per test process, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() : path(std::filesystem::temp_directory_path() / ("rannc_plan_json_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

// The message of the InputError reading `document` as "plan.json" throws, or "" if none.
std::string error_of(const json& document) {
  try {
    plan::from_json(document, "plan.json");  // qualified: nlohmann 3.11.3 has a from_json(json, char array) for ADL to find
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string file_error_of(const std::string& path) {
  try {
    read_plan_file(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The small plan with one change.
json changed(const std::function<void(json&)>& change) {
  json plan = test::small_plan();
  change(plan);
  return plan;
}

}  // namespace

TEST_CASE("a valid plan reads back with every field", "[plan_json]") {
  TempDir dir;
  auto path = dir.write("plan.json", test::small_plan().dump(1));
  Plan plan = read_plan_file(path);
  CHECK(plan.path == path);
  CHECK(plan.folder() == dir.path.string());
  CHECK(plan.model.format == "onnx");
  CHECK(plan.model.params == 10);
  CHECK(plan.model.evaluated_batch == 4);
  REQUIRE(plan.model.inputs.size() == 1);
  CHECK(plan.model.inputs[0].shape == std::vector<std::int64_t>{4, 8});
  CHECK(plan.cluster.gpus == 4);
  CHECK(plan.cluster.nodes == 2);
  CHECK(plan.cluster.mem_bytes == 1073741824);
  CHECK(plan.batch.microbatches == 2);
  CHECK(plan.schedule == Schedule::k1F1B);
  CHECK(plan.optimizer == Optimizer::kAdam);
  REQUIRE(plan.stages.size() == 2);
  const auto& second = plan.stages[1];
  CHECK(second.ranks == std::vector<int>{1, 2});
  CHECK(second.replicas_per_pipeline == 2);
  REQUIRE(second.inputs.size() == 1);
  CHECK(second.inputs[0].from_stage == 0);
  CHECK(second.inputs[0].from_output == 0);
  CHECK_FALSE(second.inputs[0].model_input);
  CHECK(plan.stages[0].inputs[0].model_input == std::optional<std::string>("x"));
  CHECK(second.outputs[0].model_output);
  CHECK(second.params[0].stage_name == "p0");
  CHECK(second.params[0].shared_with == std::vector<int>{0});
  CHECK(second.buffers[0].stage_name == "b0");
  CHECK(second.recompute == Recompute::kFull);
  CHECK(plan.stages[0].recompute == Recompute::kNone);
  CHECK(second.predicted.mem_bytes == 268435456);
  CHECK(plan.stages[0].op_range == "aten::linear h .. aten::relu a");
  CHECK(plan.stages[0].blocks == std::vector<int>{0, 3});
  REQUIRE(plan.ranks.size() == 3);
  CHECK(plan.ranks[2].node == 1);
  CHECK(plan.ranks[2].replica == 1);
  CHECK(plan.unused.ranks == std::vector<int>{3});
  CHECK(plan.predicted.iteration_ms == 12.5);
  CHECK(plan.predicted.efficiency == 0.8);
  CHECK(plan.stage_path(plan.stages[1]) == (dir.path / "stage_1.pt").string());
  // A relative model path (a plan written by hand) is taken from the plan's folder.
  CHECK(plan.model_file() == (dir.path / "models/tiny.onnx").string());
  plan.model.path = "/data/tiny.onnx";
  CHECK(plan.model_file() == "/data/tiny.onnx");
}

TEST_CASE("unreadable and foreign files are one line naming the file", "[plan_json]") {
  TempDir dir;
  auto missing = (dir.path / "nothing.json").string();
  CHECK(file_error_of(missing) == missing + ": no such file");
  CHECK(file_error_of(dir.path.string()) == dir.path.string() + ": not a regular file");
  auto empty = dir.write("empty.json", "");
  CHECK(file_error_of(empty) == empty + ": empty file, not a plan");
  std::string text = test::small_plan().dump(1);
  auto truncated = dir.write("truncated.json", text.substr(0, text.size() / 2));
  auto message = file_error_of(truncated);
  CHECK_THAT(message, Catch::StartsWith(truncated + ": not valid JSON (truncated?): parse error at line"));
  CHECK(message.find('\n') == std::string::npos);
  CHECK(error_of(json::array({1, 2})) == "plan.json: not a plan: expected a JSON object, found an array");
  CHECK(error_of(json::object({{"stages", json::array()}})) == "plan.json: format: missing (not a rannc plan)");
}

TEST_CASE("format and version are checked before any field", "[plan_json]") {
  CHECK(error_of(changed([](json& p) { p = {{"format", "onnx-model"}}; })) ==
        "plan.json: format: 'onnx-model' is not rannc-plan");
  CHECK(error_of(changed([](json& p) { p["version"] = 2; p.erase("stages"); })) ==
        "plan.json: version: 2 is not supported (this build reads version 1)");
  CHECK(error_of(changed([](json& p) { p["version"] = "1"; })) ==
        "plan.json: version: expected an integer, found a string \"1\"");
}

TEST_CASE("missing and mistyped fields are named by their JSON path", "[plan_json]") {
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["source"].erase("stage"); })) ==
        "plan.json: stages[1].inputs[0].source.stage: missing");
  CHECK(error_of(changed([](json& p) { p["stages"][0]["predicted"]["fwd_ms"] = "fast"; })) ==
        "plan.json: stages[0].predicted.fwd_ms: expected a number, found a string \"fast\"");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["params"][0].erase("stage_name"); })) ==
        "plan.json: stages[1].params[0].stage_name: missing");
  CHECK(error_of(changed([](json& p) { p["cluster"]["gpus"] = 0; })) == "plan.json: cluster.gpus: 0: must be at least 1");
  CHECK(error_of(changed([](json& p) { p["stages"] = json::object(); })) ==
        "plan.json: stages: expected an array, found an object");
  CHECK(error_of(changed([](json& p) { p["stages"][0]["outputs"][0]["batch_dim"] = 2; })) ==
        "plan.json: stages[0].outputs[0].batch_dim: 2 is not a dim of a 2-dim tensor");
  CHECK(error_of(changed([](json& p) { p["schedule"] = "zigzag"; })) ==
        "plan.json: schedule: zigzag: unknown schedule (known: 1f1b, gpipe)");
}

TEST_CASE("a stage's recompute is false, true or a name, and selective writes back as its name", "[plan_json]") {
  Plan selective = plan::from_json(changed([](json& p) { p["stages"][0]["recompute"] = "selective"; }), "plan.json");
  CHECK(selective.stages[0].recompute == Recompute::kSelective);
  CHECK(to_json(selective)["stages"][0]["recompute"] == "selective");
  CHECK(to_json(selective)["stages"][1]["recompute"] == true);  // none and full stay booleans, as older plans have them
  Plan full = plan::from_json(changed([](json& p) { p["stages"][0]["recompute"] = "full"; }), "plan.json");
  CHECK(full.stages[0].recompute == Recompute::kFull);
  CHECK(error_of(changed([](json& p) { p["stages"][0]["recompute"] = "partial"; })) ==
        "plan.json: stages[0].recompute: partial: unknown recompute (known: none, selective, full)");
  CHECK(error_of(changed([](json& p) { p["stages"][0]["recompute"] = 1; })) ==
        "plan.json: stages[0].recompute: expected a string, found an integer 1");
}

TEST_CASE("stages are in order and take inputs from earlier stages' outputs", "[plan_json]") {
  CHECK(error_of(changed([](json& p) { p["stages"][1]["id"] = 2; })) ==
        "plan.json: stages[1].id: 2, expected 1 (stage ids run 0, 1, ... in order)");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["source"]["stage"] = 1; })) ==
        "plan.json: stages[1].inputs[0].source.stage: 1 is not an earlier stage");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["source"]["output"] = 3; })) ==
        "plan.json: stages[1].inputs[0].source.output: 3 is not an output of stage 0 (it has 1)");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["name"] = "b"; })) ==
        "plan.json: stages[1].inputs[0]: 'b' float32 does not match output 0 of stage 0, 'a' float32 (same name, dtype, batch dim and other dims expected)");
  CHECK(error_of(changed([](json& p) { p["stages"][0]["inputs"][0]["source"]["model_input"] = "z"; })) ==
        "plan.json: stages[0].inputs[0].source.model_input: 'z' is not one of model.inputs");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["source"]["model_input"] = "x"; })) ==
        "plan.json: stages[1].inputs[0].source: names more than one of model_input, stage and embedding");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["inputs"][0]["shape"][1] = 99; })).find(
            "does not match output 0 of stage 0") != std::string::npos);
  CHECK(error_of(changed([](json& p) { p["stages"][1]["outputs"][0]["dtype"] = "float99"; })) ==
        "plan.json: stages[1].outputs[0].dtype: 'float99' is not a dtype");
  CHECK(error_of(changed([](json& p) { p["model"]["inputs"][0]["batch_dim"] = -1; })) ==
        "plan.json: model.inputs[0].batch_dim: -1: input 'x' has no batch dim");
}

TEST_CASE("ranks cover 0..R-1 once, as the stages place them", "[plan_json]") {
  CHECK(error_of(changed([](json& p) { p["ranks"][2]["rank"] = 1; })) == "plan.json: ranks[2].rank: 1 appears twice");
  CHECK(error_of(changed([](json& p) { p["ranks"][2]["rank"] = 5; })) == "plan.json: ranks[2].rank: 5 is not in 0..2");
  CHECK(error_of(changed([](json& p) { p["ranks"][1]["stage"] = 0; })) ==
        "plan.json: ranks[1]: rank 1 as replica 0 of stage 0 disagrees with stages[0].ranks");
  CHECK(error_of(changed([](json& p) { p["ranks"][2]["node"] = 0; })) ==
        "plan.json: ranks[2]: rank 2 is local rank 0 of node 1 with 2 devices per node, not 0 of 0");
  CHECK(error_of(changed([](json& p) { p["ranks"].erase(2); })) == "plan.json: ranks: 2 rank(s), but the stages place 3");
  CHECK(error_of(changed([](json& p) { p.erase("unused_devices"); })) ==
        "plan.json: ranks: 3 rank(s) and 0 unused device(s) do not make the cluster's 4");
  CHECK(error_of(changed([](json& p) {
          p["stages"][1]["replicas_per_pipeline"] = 3;
        })) == "plan.json: stages[1].replicas_per_pipeline: 3 does not divide the microbatch size 4");
  CHECK(error_of(changed([](json& p) { p["stages"][1]["ranks"] = {1}; })) ==
        "plan.json: stages[1].ranks: 1 rank(s), expected replicas_per_pipeline x pipelines = 2");
  CHECK(error_of(changed([](json& p) { p["batch"]["global"] = 16; })) ==
        "plan.json: batch: global 16 is not pipelines x microbatches x microbatch_size (1 x 2 x 4)");
}

TEST_CASE("interleave reads and writes back, and is written only above 1", "[plan_json]") {
  Plan plan = plan::from_json(test::interleaved_plan(), "plan.json");
  CHECK(plan.interleave == 2);
  CHECK(plan.stage_count() == 4);
  CHECK(plan.pipeline_stages() == 2);
  CHECK(plan.stages[3].ranks == std::vector<int>{1, 2});
  json written = to_json(plan);
  CHECK(written["interleave"] == 2);
  CHECK(plan::from_json(written, "plan.json").interleave == 2);
  CHECK(to_text(plan::from_json(written, "plan.json")) == to_text(plan));
  CHECK(show_text(plan).find(", 1f1b interleaved x2, adam,") != std::string::npos);
  CHECK(show_json(plan)["interleave"] == 2);

  // One chunk per rank, said or not: no key, and show as before.
  Plan single = plan::from_json(changed([](json& p) { p["interleave"] = 1; }), "plan.json");
  CHECK(single.interleave == 1);
  CHECK(single.pipeline_stages() == 2);
  CHECK_FALSE(to_json(single).contains("interleave"));
  CHECK(to_text(single) == to_text(plan::from_json(test::small_plan(), "plan.json")));
  CHECK(show_text(single).find(", 1f1b, adam,") != std::string::npos);
  CHECK_FALSE(show_json(single).contains("interleave"));
}

TEST_CASE("attention reads and writes back, and is written only when fused", "[plan_json]") {
  Plan fused = plan::from_json(changed([](json& p) { p["attention"] = "fused"; }), "plan.json");
  CHECK(fused.attention == Fusion::kFused);
  json written = to_json(fused);
  CHECK(written["attention"] == "fused");
  CHECK(to_text(plan::from_json(written, "plan.json")) == to_text(fused));
  CHECK(show_text(fused).find(", adam, fp32, fused attention\n") != std::string::npos);
  CHECK(show_json(fused)["attention"] == "fused");

  // Unfused, said or not: no key, the bytes of the plan without it, and show as before.
  Plan unfused = plan::from_json(changed([](json& p) { p["attention"] = "unfused"; }), "plan.json");
  CHECK(unfused.attention == Fusion::kUnfused);
  CHECK(plan::from_json(test::small_plan(), "plan.json").attention == Fusion::kUnfused);
  CHECK_FALSE(to_json(unfused).contains("attention"));
  CHECK(to_text(unfused) == to_text(plan::from_json(test::small_plan(), "plan.json")));
  CHECK(show_text(unfused).find(", adam, fp32\n") != std::string::npos);
  CHECK_FALSE(show_json(unfused).contains("attention"));

  CHECK(error_of(changed([](json& p) { p["attention"] = "flash"; })) ==
        "plan.json: attention: flash: unknown kernel fusion (known: unfused, fused)");
  CHECK(error_of(changed([](json& p) { p["attention"] = true; })) == "plan.json: attention: expected a string, found a boolean true");
}

TEST_CASE("an interleaved plan's later chunks run where their device group's first stage does", "[plan_json]") {
  auto interleaved = [](const std::function<void(json&)>& change) {
    json plan = test::interleaved_plan();
    change(plan);
    return plan;
  };
  CHECK(error_of(interleaved([](json& p) { p["interleave"] = "2"; })) ==
        "plan.json: interleave: expected an integer, found a string \"2\"");
  CHECK(error_of(interleaved([](json& p) { p["interleave"] = 0; })) == "plan.json: interleave: 0: must be in 1..64");
  CHECK(error_of(interleaved([](json& p) { p["interleave"] = 65; })) == "plan.json: interleave: 65: must be in 1..64");
  CHECK(error_of(interleaved([](json& p) { p["interleave"] = 3; })) == "plan.json: interleave: 3 does not divide the 4 stages");
  CHECK(error_of(interleaved([](json& p) {
          p["batch"]["microbatches"] = 3;
          p["batch"]["global"] = 12;
        })) == "plan.json: interleave: 2 model chunks per rank need the 3 microbatches to be a multiple of the 2 pipeline stages");
  CHECK(error_of(interleaved([](json& p) { p["schedule"] = "gpipe"; })) ==
        "plan.json: interleave: 2 model chunks per rank need the 1f1b schedule, not gpipe");
  CHECK(error_of(interleaved([](json& p) { p["stages"][3]["ranks"] = {1, 3}; })) ==
        "plan.json: stages[3].ranks: [1, 3] differ from stage 1's [1, 2] (interleave 2: stage s runs on the devices of "
        "stage s mod 2)");
  CHECK(error_of(interleaved([](json& p) {
          p["stages"][3]["replicas_per_pipeline"] = 1;
          p["stages"][3]["replicas"] = 1;
          p["stages"][3]["tensor_parallel"] = {{"degree", 2}, {"regions", json::array()}, {"weights", json::array()},
                                               {"unsplit", json::array()}};
        })) == "plan.json: stages[3]: tensor_parallel.degree 2 differs from stage 1's 1 (interleave 2: stage s runs on the "
               "devices of stage s mod 2)");
  // A rank is placed by its group's first stage, and belongs to one group.
  CHECK(error_of(interleaved([](json& p) { p["ranks"][1]["stage"] = 3; })) ==
        "plan.json: ranks[1].stage: 3 is not a stage that starts a device group (interleave 2: stages 0..1)");
  CHECK(error_of(interleaved([](json& p) {
          p["stages"][0]["ranks"] = {1};
          p["stages"][2]["ranks"] = {1};
        })) == "plan.json: ranks[0]: rank 0 as replica 0 of stage 0 disagrees with stages[0].ranks");
}

TEST_CASE("stage files named by the plan must exist", "[plan_json]") {
  TempDir dir;
  Plan plan = read_plan_file(dir.write("plan.json", test::small_plan().dump()));
  dir.write("stage_0.pt", "x");
  try {
    check_stage_files(plan);
    FAIL("no error for the missing stage_1.pt");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == plan.path + ": stage 1's file " + (dir.path / "stage_1.pt").string() +
                                       " is missing (write the stage files with the partition verb)");
  }
  dir.write("stage_1.pt", "x");
  CHECK_NOTHROW(check_stage_files(plan));
}

TEST_CASE("stage files must be the ones whose sha256 the plan records", "[plan_json]") {
  TempDir dir;
  dir.write("stage_0.pt", "zero");
  dir.write("stage_1.pt", "one");
  json document = test::small_plan();
  document["stages"][0]["sha256"] = sha256_of_file((dir.path / "stage_0.pt").string());
  document["stages"][1]["sha256"] = sha256_of_file((dir.path / "stage_0.pt").string());  // not stage_1's
  Plan plan = read_plan_file(dir.write("plan.json", document.dump()));
  CHECK(plan.stages[0].sha256.size() == 64);
  CHECK_NOTHROW(check_stage_file(plan, plan.stages[0]));
  CHECK_NOTHROW(check_stage_file(plan, plan.stages[1], /*check_sha256=*/false));
  try {
    check_stage_files(plan);
    FAIL("no error for a stage_1.pt that is not the plan's");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith((dir.path / "stage_1.pt").string() + " does not match " + plan.path + " (sha256 "));
    CHECK_THAT(e.what(), Catch::EndsWith("...); re-run partition"));
  }
  CHECK(error_of(changed([](json& p) { p["stages"][0]["sha256"] = std::string(64, 'F'); })) ==
        "plan.json: stages[0].sha256: '" + std::string(60, 'F') + "...' is not a SHA-256 (64 lowercase hex digits)");
  CHECK(error_of(changed([](json& p) { p["stages"][0]["sha256"] = 5; })) ==
        "plan.json: stages[0].sha256: expected a string, found an integer 5");
}

TEST_CASE("a mixed cluster's plan names each rank's device and each replica's samples", "[plan_json][mixed]") {
  // The small plan on a node of a100-40g (ranks 0, 1) and a node of h100-80g (ranks 2, 3), its
  // second stage shared by the kinds: the a100 replica runs 1 sample of each 4, the h100 one 3.
  auto mixed = [](json& p) {
    p["cluster"]["device"] = "a100-40g+h100-80g";
    p["cluster"]["node_groups"] = {
        {{"nodes", 1}, {"device", "a100-40g"}, {"mem_bytes", 1 << 30}, {"intra_node", {{"bandwidth_gbps", 300}, {"latency_us", 3}}}},
        {{"nodes", 1}, {"device", "h100-80g"}, {"mem_bytes", std::int64_t{2} << 30}, {"intra_node", {{"bandwidth_gbps", 450}, {"latency_us", 3}}}}};
    p["ranks"][0]["device"] = "a100-40g";
    p["ranks"][1]["device"] = "a100-40g";
    p["ranks"][2]["device"] = "h100-80g";
    p["stages"][1]["replica_samples"] = {1, 3};
  };
  Plan plan = plan::from_json(changed(mixed), "plan.json");
  REQUIRE(plan.cluster.node_groups.size() == 2);
  CHECK(plan.cluster.node_groups[1].device == "h100-80g");
  CHECK(plan.cluster.mem_of_rank(1) == 1 << 30);
  CHECK(plan.cluster.mem_of_rank(2) == std::int64_t{2} << 30);
  CHECK(plan.ranks[2].device == "h100-80g");
  CHECK(plan.stages[1].replica_rows(0, 4) == std::make_pair<std::int64_t, std::int64_t>(0, 1));
  CHECK(plan.stages[1].replica_rows(1, 4) == std::make_pair<std::int64_t, std::int64_t>(1, 3));
  CHECK(plan.stages[1].common_slice(4) == 1);
  CHECK(plan.stages[0].replica_rows(0, 4) == std::make_pair<std::int64_t, std::int64_t>(0, 4));
  json written = to_json(plan);
  CHECK(written["stages"][1]["replica_samples"] == json({1, 3}));
  CHECK(written["ranks"][2]["device"] == "h100-80g");
  CHECK(written["cluster"]["node_groups"][0]["nodes"] == 1);
  CHECK(plan::from_json(written, "again.json").cluster.node_groups.size() == 2);
  // A uniform plan writes none of them.
  json uniform = to_json(plan::from_json(test::small_plan(), "plan.json"));
  CHECK_FALSE(uniform["cluster"].contains("node_groups"));
  CHECK_FALSE(uniform["ranks"][0].contains("device"));
  CHECK_FALSE(uniform["stages"][1].contains("replica_samples"));

  auto broken = [&](const std::function<void(json&)>& change) {
    return error_of(changed([&](json& p) {
      mixed(p);
      change(p);
    }));
  };
  CHECK(broken([](json& p) { p["ranks"][2]["device"] = "a100-40g"; }) ==
        "plan.json: ranks[2]: rank 2 is a h100-80g, not a a100-40g");
  CHECK(broken([](json& p) { p["ranks"][2].erase("device"); }) ==
        "plan.json: ranks[2]: rank 2 is a h100-80g, but its device is not given");
  CHECK(error_of(changed([](json& p) { p["ranks"][0]["device"] = "a100-40g"; })) ==
        "plan.json: ranks[0]: rank 0 is a a100-80g, not a a100-40g");
  CHECK(broken([](json& p) { p["cluster"]["node_groups"][1]["nodes"] = 2; }) ==
        "plan.json: cluster.node_groups: the groups' 3 node(s) do not make the cluster's 2");
  CHECK(broken([](json& p) { p["cluster"]["device"] = "a100-40g"; }) ==
        "plan.json: cluster.device: a100-40g: a mixed cluster's device names its groups' kinds, a100-40g+h100-80g");
  CHECK(broken([](json& p) { p["cluster"]["mem_bytes"] = std::int64_t{2} << 30; }) ==
        "plan.json: cluster.mem_bytes: 2147483648: a mixed cluster's is its groups' least, 1073741824");
  CHECK(broken([](json& p) { p["cluster"]["node_groups"].erase(1); }) ==
        "plan.json: cluster.node_groups: a mixed cluster has two node groups at least");
  CHECK(broken([](json& p) { p["stages"][1]["replica_samples"] = {2, 3}; }) ==
        "plan.json: stages[1].replica_samples: [2, 3]: not one sample count per replica of a pipeline (2) adding up to "
        "the microbatch size 4");
  CHECK(broken([](json& p) { p["stages"][1]["replica_samples"] = {4}; }) ==
        "plan.json: stages[1].replica_samples: [4]: not one sample count per replica of a pipeline (2) adding up to "
        "the microbatch size 4");
  CHECK(broken([](json& p) { p["stages"][1]["replica_samples"] = {0, 4}; }) ==
        "plan.json: stages[1].replica_samples[0]: 0: must be at least 1");
}

TEST_CASE("context parallelism reads and writes back, and its groups are checked", "[plan_json][context]") {
  // Stage 1's two ranks as one replica of a context group of 2: rank 2 holds the second half of
  // each sample's positions.
  auto with_context = [](json& p) {
    p["stages"][1]["replicas"] = 1;
    p["stages"][1]["replicas_per_pipeline"] = 1;
    p["stages"][1]["context_parallel"] = {{"degree", 2}};
    p["ranks"][2]["context_rank"] = 1;
  };
  Plan plan = plan::from_json(changed(with_context), "plan.json");
  CHECK(plan.stages[1].context_degree == 2);
  CHECK(plan.stages[1].group_devices() == 2);
  CHECK(plan.stages[1].replicas() == 1);
  CHECK(plan.stages[0].context_degree == 1);
  CHECK(plan.ranks[2].context_rank == 1);
  json written = to_json(plan);
  CHECK(written["stages"][1]["context_parallel"] == json{{"degree", 2}});
  CHECK_FALSE(written["stages"][0].contains("context_parallel"));
  CHECK(written["ranks"][2]["context_rank"] == 1);
  CHECK_FALSE(written["ranks"][1].contains("context_rank"));
  CHECK(to_text(plan::from_json(written, "plan.json")) == to_text(plan));
  CHECK(show_text(plan).find("1 x 1 x cp 2") != std::string::npos);
  CHECK(show_json(plan)["stages"][1]["context_parallel"] == json{{"degree", 2}});

  CHECK(error_of(changed([&](json& p) { with_context(p), p["ranks"][2].erase("context_rank"); })) ==
        "plan.json: ranks[2]: rank 2 has context rank 0, but its place 1 in a stage of context groups of 2 x 1 makes it 1");
  // A group of 3 devices neither lies in a node of 2 nor fills whole nodes (one of 4 would).
  CHECK(error_of(changed([&](json& p) { with_context(p), p["stages"][1]["context_parallel"]["degree"] = 3; })) ==
        "plan.json: stages[1].context_parallel.degree: 3 x tensor_parallel.degree 1 neither divides the 2 devices of a "
        "node nor is a whole number of nodes");
  CHECK(error_of(changed([&](json& p) { with_context(p), p["stages"][1]["replicas_per_pipeline"] = 2; })) ==
        "plan.json: stages[1].ranks: 2 rank(s), expected replicas_per_pipeline x pipelines x context_parallel.degree = 4");
  CHECK(error_of(changed([&](json& p) { with_context(p), p["stages"][1]["context_parallel"]["degree"] = 0; })).find(
            "stages[1].context_parallel.degree") != std::string::npos);
}
