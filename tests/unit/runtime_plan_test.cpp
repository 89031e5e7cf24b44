// The runtime's plan arithmetic: pass order per schedule, replica slices and the pieces sent
// between stages with different replica counts, gradient groups, and the .npy reader.
#include <catch2/catch.hpp>

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include "plan/checkpoint.h"
#include "plan/plan_json.h"
#include "plan/tensor_slices.h"
#include "runtime/data_order.h"
#include "runtime/lr_schedule.h"
#include "runtime/npy_file.h"
#include "runtime/rank_layout.h"
#include "support/error.h"
#include "tests/unit/plan_fixture.h"

namespace rannc::runtime {
namespace {

// Two stages: stage 0 with `senders` replicas, stage 1 with `receivers`, microbatches of `samples`.
plan::Plan two_stage_plan(int senders, int receivers, int samples, nlohmann::json& document) {
  document = test::small_plan();
  document["cluster"]["gpus"] = senders + receivers;
  document["cluster"]["gpus_per_node"] = senders + receivers;
  document["cluster"]["nodes"] = 1;
  document["unused_devices"] = {{"count", 0}, {"ranks", nlohmann::json::array()}, {"reason", ""}};
  document["batch"] = {{"global", 2 * samples}, {"pipelines", 1}, {"microbatches", 2}, {"microbatch_size", samples}};
  document["model"]["inputs"][0]["shape"] = {samples, 8};
  auto& stages = document["stages"];
  document["ranks"] = nlohmann::json::array();
  int rank = 0;
  for (int s = 0; s < 2; ++s) {
    int replicas = s == 0 ? senders : receivers;
    stages[s]["replicas"] = stages[s]["replicas_per_pipeline"] = replicas;
    stages[s]["ranks"] = nlohmann::json::array();
    for (int j = 0; j < replicas; ++j, ++rank) {
      stages[s]["ranks"].push_back(rank);
      document["ranks"].push_back({{"rank", rank}, {"node", 0}, {"local_rank", rank}, {"stage", s}, {"replica", j}});
    }
    for (auto* list : {&stages[s]["inputs"], &stages[s]["outputs"]})
      for (auto& tensor : *list) tensor["shape"][0] = samples / replicas;
  }
  return plan::from_json(document, "plan.json");
}

}  // namespace

TEST_CASE("ranks map to stage, pipeline and replica as the planner lays them out", "[runtime]") {
  auto document = test::small_plan();
  auto plan = plan::from_json(document, "plan.json");
  RankLayout layout(plan);
  CHECK(layout.world_size() == 3);
  CHECK(layout.placement(2).stage == 1);
  CHECK(layout.placement(2).replica == 1);
  CHECK(layout.rank_of(1, 0, 1) == 2);
  CHECK(layout.replica_slice(1, 1).begin == 2);
  CHECK(layout.replica_slice(1, 1).length == 2);
  CHECK(layout.microbatch_start(0, 1) == 4);
  // Rank 2 (stage 1, replica 1) reads samples 2-3 of each microbatch of 4.
  auto rows = layout.step_rows(layout.placement(2));
  REQUIRE(rows.size() == static_cast<std::size_t>(plan.batch.microbatches));
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].begin == layout.microbatch_start(0, static_cast<int>(i)) + 2);
    CHECK(rows[i].length == 2);
  }
}

TEST_CASE("slices go to the replicas whose samples they overlap, at the right offsets", "[runtime]") {
  nlohmann::json document;
  auto plan = two_stage_plan(2, 3, 6, document);  // stage 0 slices of 3, stage 1 slices of 2
  RankLayout layout(plan);
  auto sent = layout.pieces_to(0, 0, 1, true);  // samples 0-2
  REQUIRE(sent.size() == 2);
  CHECK((sent[0].peer_replica == 0 && sent[0].at_sender.begin == 0 && sent[0].at_sender.length == 2));
  CHECK((sent[1].peer_replica == 1 && sent[1].at_sender.begin == 2 && sent[1].at_sender.length == 1));
  CHECK((sent[1].at_receiver.begin == 0 && sent[1].at_receiver.length == 1));
  auto received = layout.pieces_from(1, 1, 0, true);  // samples 2-3: one from each sender
  REQUIRE(received.size() == 2);
  CHECK((received[0].peer_replica == 0 && received[0].at_sender.begin == 2 && received[0].at_receiver.begin == 0));
  CHECK((received[1].peer_replica == 1 && received[1].at_sender.begin == 0 && received[1].at_receiver.begin == 1));
  // Every sample arrives once: the receivers' pieces cover their slices exactly.
  for (int k = 0; k < 3; ++k) {
    std::int64_t covered = 0;
    for (const auto& piece : layout.pieces_from(1, k, 0, true)) covered += piece.at_receiver.length;
    CHECK(covered == 2);
  }
}

TEST_CASE("a tensor without a batch dim goes whole to every replica, and only from one", "[runtime]") {
  nlohmann::json document;
  auto plan = two_stage_plan(1, 2, 4, document);
  RankLayout layout(plan);
  CHECK(layout.pieces_to(0, 0, 1, false).size() == 2);
  CHECK(layout.pieces_from(1, 1, 0, false).size() == 1);

  document["stages"][0]["outputs"][0]["batch_dim"] = -1;
  document["stages"][1]["inputs"][0]["batch_dim"] = -1;
  document["stages"][0]["outputs"][0]["shape"] = {16};
  document["stages"][1]["inputs"][0]["shape"] = {16};
  auto reduced = plan::from_json(document, "plan.json");
  CHECK_NOTHROW(RankLayout(reduced));
  auto replicated = two_stage_plan(2, 1, 4, document);
  document["stages"][0]["outputs"][0]["batch_dim"] = -1;
  document["stages"][1]["inputs"][0]["batch_dim"] = -1;
  document["stages"][0]["outputs"][0]["shape"] = {16};
  document["stages"][1]["inputs"][0]["shape"] = {16};
  auto batch_reduced = plan::from_json(document, "plan.json");
  CHECK_THROWS_WITH(RankLayout(batch_reduced), Catch::Contains("cannot be split among replicas"));
}

TEST_CASE("gradients are summed over every rank holding a copy, tied copies included", "[runtime]") {
  auto document = test::small_plan();
  document["stages"][0]["params"][0]["shared_with"] = {1};
  document["stages"][0]["params"][0]["name"] = "fc2.weight";
  document["stages"][0]["params"].push_back({{"name", "fc1.bias"}, {"stage_name", "p1"}, {"numel", 2}, {"bytes", 8}});
  auto plan = plan::from_json(document, "plan.json");
  RankLayout layout(plan);
  auto groups = layout.gradient_groups(0);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].key == "stages 0");
  CHECK(groups[0].ranks == std::vector<int>{0});
  CHECK(groups[0].weights == std::vector<int>{1});
  CHECK(groups[1].key == "stages 0,1");
  CHECK(groups[1].ranks == std::vector<int>{0, 1, 2});
  auto other = layout.gradient_groups(1);
  REQUIRE(other.size() == 1);
  CHECK(other[0].key == "stages 0,1");
  CHECK(other[0].ranks == std::vector<int>{0, 1, 2});
  CHECK_FALSE(other[0].sharded);

  // Stage 1 (2 replicas) shards its state: so does every group it is in, tied copies included,
  // but not stage 0's own group of one rank.
  document["stages"][1]["state_sharding"] = "optimizer";
  auto sharded_plan = plan::from_json(document, "plan.json");
  RankLayout sharded_layout(sharded_plan);
  auto sharded = sharded_layout.gradient_groups(0);
  CHECK_FALSE(sharded[0].sharded);
  CHECK(sharded[1].sharded);
}

TEST_CASE("shard buckets cover the weights once, each cut into one chunk per rank", "[runtime]") {
  auto buckets = shard_buckets(10, 3, 4);
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0].begin == 0);
  CHECK(buckets[0].length == 4);
  CHECK(buckets[0].chunk == 2);  // ranks own [0, 2), [2, 4) and nothing: 3 chunks pad 4 to 6
  CHECK(buckets[2].begin == 8);
  CHECK(buckets[2].length == 2);
  CHECK(buckets[2].chunk == 1);
  for (std::int64_t elements : {1, 7, 64, 1000}) {
    for (int ranks : {1, 2, 3, 8}) {
      std::int64_t covered = 0;
      for (const auto& bucket : shard_buckets(elements, ranks, 16)) {
        CHECK(bucket.begin == covered);
        CHECK(bucket.chunk * ranks >= bucket.length);
        CHECK((bucket.chunk - 1) * ranks < bucket.length);
        covered += bucket.length;
      }
      CHECK(covered == elements);
    }
  }
  CHECK(shard_buckets(0, 4, 16).empty());
}

namespace {

std::string npy_bytes(const std::string& header_dict, const std::string& data) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  std::string path = std::string(P_tmpdir) + "/rannc_runtime_test_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST_CASE(".npy files read row by row", "[runtime]") {
  float values[6] = {0, 1, 2, 3, 4, 5};
  std::string data(reinterpret_cast<const char*>(values), sizeof values);
  NpyFile file(write_temp("ok.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", data)));
  CHECK(file.dtype() == ir::DType::kFloat32);
  CHECK(file.shape() == std::vector<std::int64_t>{3, 2});
  auto rows = file.read_rows(1, 2);
  REQUIRE(rows.size() == 16);
  float read[4];
  std::memcpy(read, rows.data(), sizeof read);
  CHECK((read[0] == 2 && read[3] == 5));
  CHECK_THROWS_WITH(file.read_rows(2, 2), Catch::Contains("rows 2..4 asked of 3"));
  CHECK(file.bytes_read() == 16);
}

TEST_CASE("the data order: whole steps per epoch, epochs wrap, a shuffle permutes each epoch", "[runtime]") {
  // 10 rows, batch 4: 2 steps per epoch (rows 8-9 left out), step 2 starts epoch 1.
  DataOrder in_order(10, 4, false, 0);
  CHECK(in_order.steps_per_epoch() == 2);
  CHECK(in_order.row(1, 3) == 7);
  CHECK(in_order.row(2, 0) == 0);
  CHECK(in_order.row(5, 2) == 6);
  DataOrder shuffled(10, 4, true, 7);
  std::vector<std::int64_t> epoch0, epoch1;
  for (int step = 0; step < 2; ++step)
    for (int sample = 0; sample < 4; ++sample) epoch0.push_back(shuffled.row(step, sample));
  for (int sample = 0; sample < 4; ++sample) epoch1.push_back(shuffled.row(2, sample));
  auto permutation = epoch_permutation(10, 7, 0);
  CHECK(std::vector<std::int64_t>(permutation.begin(), permutation.begin() + 8) == epoch0);
  std::sort(permutation.begin(), permutation.end());
  for (std::int64_t i = 0; i < 10; ++i) CHECK(permutation[static_cast<std::size_t>(i)] == i);  // a permutation
  CHECK(epoch1 != std::vector<std::int64_t>(epoch0.begin(), epoch0.begin() + 4));  // another per epoch
  // Fixed values, which tests/runtime/training_reference.py's epoch_permutation must give too.
  CHECK(epoch_permutation(5, 1, 0) == std::vector<std::int64_t>{4, 2, 0, 1, 3});
  CHECK_THROWS_WITH(DataOrder(3, 4, false, 0), "--data: 3 rows, fewer than one global batch of 4");
}

TEST_CASE("bad .npy files are one line naming the file", "[runtime]") {
  auto check = [](const std::string& name, const std::string& bytes, const std::string& message) {
    auto path = write_temp(name, bytes);
    CHECK_THROWS_WITH(NpyFile(path), Catch::Contains(path) && Catch::Contains(message));
  };
  std::string eight_floats(32, '\0');
  check("text.npy", "x,y\n1,2\n", "not a .npy file");
  check("fortran.npy", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 4), }", eight_floats), "Fortran");
  check("big_endian.npy", npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 4), }", eight_floats),
        "'>f4' is not supported");
  check("short.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", eight_floats), "truncated");
  check("huge.npy", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 4), }", ""),
        "too large");
  CHECK_THROWS_WITH(NpyFile("/nonexistent/x.npy"), Catch::Contains("cannot open"));
}

}  // namespace rannc::runtime

TEST_CASE("learning-rate schedules: warm-up from 0, then constant, linear or cosine decay to 0", "[runtime]") {
  using rannc::runtime::LrSchedule;
  using rannc::runtime::lr_factor;
  // 2 warm-up steps of 10: 0, 1/2, then the decay over the 8 steps left.
  CHECK(lr_factor(LrSchedule::kLinear, 0, 2, 10) == 0);
  CHECK(lr_factor(LrSchedule::kLinear, 1, 2, 10) == 0.5);
  CHECK(lr_factor(LrSchedule::kLinear, 2, 2, 10) == 1);
  CHECK(lr_factor(LrSchedule::kLinear, 6, 2, 10) == Approx(0.5));
  CHECK(lr_factor(LrSchedule::kLinear, 10, 2, 10) == 0);
  CHECK(lr_factor(LrSchedule::kCosine, 2, 2, 10) == Approx(1));
  CHECK(lr_factor(LrSchedule::kCosine, 6, 2, 10) == Approx(0.5));
  CHECK(lr_factor(LrSchedule::kCosine, 10, 2, 10) == Approx(0).margin(1e-12));
  CHECK(lr_factor(LrSchedule::kConstant, 0, 0, 10) == 1);
  CHECK(lr_factor(LrSchedule::kConstant, 9, 0, 10) == 1);
  // Warm-up longer than the run: still rising at the end.
  CHECK(lr_factor(LrSchedule::kCosine, 4, 10, 5) == Approx(0.4));
  CHECK(rannc::runtime::parse_lr_schedule("cosine") == LrSchedule::kCosine);
  CHECK_THROWS_WITH(rannc::runtime::parse_lr_schedule("step"),
                    "--lr-schedule step: unknown (known: constant, linear, cosine)");
}

namespace rannc::runtime {
namespace {

// Two stages of tensor-parallel groups of 2 on one node of 8, in 2 pipelines: stage 0 on ranks
// 0-3, stage 1 on 4-7; stage 1's weight is tied to stage 0's.
nlohmann::json tensor_parallel_document() {
  auto document = test::small_plan();
  document["cluster"] = {{"gpus", 8}, {"nodes", 1}, {"gpus_per_node", 8}, {"mem_bytes", 1073741824}, {"device", "a100-80g"}};
  document["unused_devices"] = {{"count", 0}, {"ranks", nlohmann::json::array()}, {"reason", ""}};
  document["batch"] = {{"global", 16}, {"pipelines", 2}, {"microbatches", 2}, {"microbatch_size", 4}};
  document["ranks"] = nlohmann::json::array();
  auto& stages = document["stages"];
  stages[0]["params"][0]["name"] = "fc2.weight";
  stages[0]["params"][0]["shared_with"] = {1};
  for (int s = 0; s < 2; ++s) {
    stages[s]["replicas"] = 2;
    stages[s]["replicas_per_pipeline"] = 1;
    stages[s]["ranks"] = nlohmann::json::array();
    for (auto* list : {&stages[s]["inputs"], &stages[s]["outputs"]})
      for (auto& tensor : *list) tensor["shape"][0] = 4;
    auto files = nlohmann::json::array();
    for (int t = 0; t < 2; ++t) files.push_back({{"file", "stage_" + std::to_string(s) + "_tp" + std::to_string(t) + ".pt"}});
    stages[s]["tensor_parallel"] = {{"degree", 2}, {"regions", nlohmann::json::array()}, {"weights", nlohmann::json::array()},
                                    {"unsplit", nlohmann::json::array()}, {"files", files}};
    for (int i = 0; i < 4; ++i) {
      int rank = s * 4 + i;
      stages[s]["ranks"].push_back(rank);
      document["ranks"].push_back({{"rank", rank}, {"node", 0}, {"local_rank", rank}, {"stage", s}, {"replica", i},
                                   {"tensor_rank", i % 2}});
    }
  }
  return document;
}

}  // namespace

TEST_CASE("tensor ranks: groups of consecutive ranks, their own files, gradients summed per tensor rank", "[runtime]") {
  auto document = tensor_parallel_document();
  auto plan = plan::from_json(document, "out/plan.json");
  RankLayout layout(plan);
  auto third = layout.placement(3);
  CHECK(third.stage == 0);
  CHECK(third.pipeline == 1);
  CHECK(third.replica == 0);
  CHECK(third.tensor_rank == 1);
  CHECK(layout.rank_of(1, 1, 0, 1) == 7);
  CHECK(layout.tensor_group(5) == std::vector<int>{4, 5});
  CHECK(layout.tensor_group(2) == std::vector<int>{2, 3});
  // Both ranks of a group read the same samples.
  auto rows_0 = layout.step_rows(layout.placement(2)), rows_1 = layout.step_rows(layout.placement(3));
  REQUIRE(rows_0.size() == rows_1.size());
  for (std::size_t i = 0; i < rows_0.size(); ++i) CHECK((rows_0[i].begin == rows_1[i].begin && rows_0[i].length == 4));
  // The tied weight: its copies of tensor rank 1 in both stages and both pipelines.
  auto groups = layout.gradient_groups(0, 1);
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].key == "stages 0,1 tensor rank 1, whole");
  CHECK(groups[0].ranks == std::vector<int>{1, 3, 5, 7});
  CHECK_FALSE(groups[0].counted_in_norm);  // rank 0 of the tensor group counts the whole weights
  CHECK(layout.gradient_groups(0, 0)[0].counted_in_norm);
  // A weight the group splits: its slices are grouped and counted apart, by every tensor rank.
  document["stages"][0]["tensor_parallel"]["weights"] = {{{"name", "fc2.weight"}, {"dim", 0}}};
  document["stages"][1]["tensor_parallel"]["weights"] = {{{"name", "fc2.weight"}, {"dim", 0}}};
  auto split_plan = plan::from_json(document, "out/plan.json");
  auto split_groups = RankLayout(split_plan).gradient_groups(0, 1);
  REQUIRE(split_groups.size() == 1);
  CHECK(split_groups[0].key == "stages 0,1 tensor rank 1");
  CHECK(split_groups[0].counted_in_norm);
  CHECK(layout.gradient_groups(1, 0)[0].ranks == std::vector<int>{0, 2, 4, 6});
  CHECK(plan.stage_path(plan.stages[1], 1) == "out/stage_1_tp1.pt");
  CHECK(plan.stage_path(plan.stages[1]) == "out/stage_1.pt");
}

TEST_CASE("a tensor-parallel stage names one file per tensor rank, written back as read", "[runtime]") {
  auto document = tensor_parallel_document();
  auto plan = plan::from_json(document, "plan.json");
  auto written = nlohmann::json::parse(plan::to_text(plan));
  CHECK(written["stages"][1]["tensor_parallel"]["files"] == document["stages"][1]["tensor_parallel"]["files"]);
  document["stages"][1]["tensor_parallel"]["files"].erase(1);
  CHECK_THROWS_WITH(plan::from_json(document, "plan.json"),
                    Catch::Contains("stages[1].tensor_parallel.files: 1 files for degree 2 (one per tensor rank)"));
  document = tensor_parallel_document();
  document["stages"][0]["tensor_parallel"]["files"][0]["sha256"] = "beef";
  CHECK_THROWS_WITH(plan::from_json(document, "plan.json"), Catch::Contains("is not a SHA-256"));
}

TEST_CASE("checkpoint files: a tensor-parallel stage's once per tensor rank, other stages' once", "[runtime]") {
  auto plan = plan::from_json(tensor_parallel_document(), "plan.json");
  CHECK(plan::stage_weights_file(plan.stages[1], 1) == "stage_1_tp1.pt");
  CHECK(plan::stage_optimizer_file(plan.stages[1], 0) == "stage_1_tp0.optimizer.pt");
  plan.stages[1].tensor_parallel.degree = 1;
  CHECK(plan::stage_weights_file(plan.stages[1], 0) == "stage_1.pt");
  CHECK(plan::stage_optimizer_file(plan.stages[1], 0) == "stage_1.optimizer.pt");
}

TEST_CASE("tensor slices: tensor_split's cut, each part of a fused weight cut alike", "[runtime]") {
  // 50257 rows over 4 ranks: 12565, 12564, 12564, 12564, end to end.
  std::int64_t next = 0;
  for (int rank = 0; rank < 4; ++rank) {
    auto slice = plan::tensor_slice(50257, 4, rank);
    CHECK(slice.begin == next);
    CHECK(slice.length == (rank == 0 ? 12565 : 12564));
    next = slice.begin + slice.length;
  }
  CHECK(next == 50257);
  // A fused QKV of 3 x 8 rows over 2 ranks: rank 1 holds rows 4-7, 12-15 and 20-23.
  auto slices = plan::weight_slices(24, 3, 2, 1);
  REQUIRE(slices.size() == 3);
  for (int g = 0; g < 3; ++g) {
    CHECK(slices[g].begin == 8 * g + 4);
    CHECK(slices[g].length == 4);
  }
}

}  // namespace rannc::runtime

namespace rannc::runtime {

TEST_CASE("interleaved: a rank runs its device group's chunks, their gradient groups together", "[runtime]") {
  auto document = test::interleaved_plan();
  auto plan = plan::from_json(document, "plan.json");
  RankLayout layout(plan);
  // Ranks are placed by their group's first stage, not by a later chunk.
  CHECK(layout.placement(0).stage == 0);
  CHECK(layout.placement(2).stage == 1);
  CHECK(layout.placement(2).replica == 1);
  CHECK(layout.stages_of(0) == std::vector<int>{0, 2});
  CHECK(layout.stages_of(1) == std::vector<int>{1, 3});
  // Rank 1 holds stage 1's fc2.weight (tied to stage 0: "stages 0,1") then stage 3's fc4.weight.
  auto groups = layout.rank_gradient_groups(1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].key == "stages 0,1");
  CHECK(groups[0].weights == std::vector<int>{0});
  CHECK(groups[1].key == "stages 3");
  CHECK(groups[1].weights == std::vector<int>{1});
  CHECK(groups[1].ranks == std::vector<int>{1, 2});
}

}  // namespace rannc::runtime
