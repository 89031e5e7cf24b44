#include <catch2/catch.hpp>

#include "partitioner/simulate.h"

#include <string>

namespace rannc::partition {

TEST_CASE("1F1B over equal stages takes (M + S - 1) slots and keeps S - s microbatches", "[simulate]") {
  std::vector<SimulatedStage> stages(4, SimulatedStage{1.0, 2.0, 0.0, 0.0});
  std::vector<int> replicas(4, 1);
  auto result = simulate(stages, replicas, 8, plan::Schedule::k1F1B);
  CHECK(result.iteration_ms == Approx((8 + 4 - 1) * 3.0));
  CHECK(result.max_in_flight == std::vector<int>{4, 3, 2, 1});
  CHECK(result.bubble_fraction == Approx(1 - 8 * 3.0 / (11 * 3.0)));
  CHECK(result.tasks.size() == 4 * 2 * 8);
}

TEST_CASE("GPipe keeps every microbatch in flight and takes as long as 1F1B on equal stages", "[simulate]") {
  std::vector<SimulatedStage> stages(3, SimulatedStage{1.0, 2.0, 0.0, 0.0});
  auto result = simulate(stages, {1, 1, 1}, 4, plan::Schedule::kGPipe);
  CHECK(result.max_in_flight == std::vector<int>{4, 4, 4});
  CHECK(result.iteration_ms == Approx((4 + 3 - 1) * 3.0));
}

TEST_CASE("transfers delay neighbours and the allreduce ends the step", "[simulate]") {
  std::vector<SimulatedStage> stages{{1.0, 1.0, 0.0, 5.0}, {1.0, 1.0, 0.5, 0.0}};
  auto result = simulate(stages, {2, 1}, 1, plan::Schedule::k1F1B);
  // F0 [0,1], transfer 0.5, F1 [1.5,2.5], B1 [2.5,3.5], transfer 0.5, B0 [4,5], allreduce 5.
  CHECK(result.finish_ms[1] == Approx(3.5));
  CHECK(result.finish_ms[0] == Approx(10.0));
  CHECK(result.iteration_ms == Approx(10.0));
  // Stage 0 has two replicas busy 2 ms each, stage 1 one: 6 of 3 x 10 rank-ms.
  CHECK(result.bubble_fraction == Approx(1 - 6.0 / 30.0));
}

TEST_CASE("the timeline records transfers and the allreduce beside compute", "[simulate]") {
  std::vector<SimulatedStage> stages{{1.0, 1.0, 0.0, 5.0}, {1.0, 1.0, 0.5, 0.0}};
  auto result = simulate(stages, {2, 1}, 1, plan::Schedule::k1F1B);
  struct Box {
    int stage, microbatch;
    TaskKind kind;
    double start, end;
    int peer;
  };
  // F0, activations 0 -> 1, F1, B1, gradients 1 -> 0, B0, then stage 0's allreduce (stage 1
  // has one replica: no allreduce box).
  std::vector<Box> expected{{0, 0, TaskKind::kForward, 0, 1, -1},
                            {1, 0, TaskKind::kActivationTransfer, 1, 1.5, 0},
                            {1, 0, TaskKind::kForward, 1.5, 2.5, -1},
                            {1, 0, TaskKind::kBackward, 2.5, 3.5, -1},
                            {0, 0, TaskKind::kGradientTransfer, 3.5, 4, 1},
                            {0, 0, TaskKind::kBackward, 4, 5, -1},
                            {0, -1, TaskKind::kAllreduce, 5, 10, -1}};
  REQUIRE(result.tasks.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("task " << i);
    const auto& task = result.tasks[i];
    CHECK(task.stage == expected[i].stage);
    CHECK(task.microbatch == expected[i].microbatch);
    CHECK(task.kind == expected[i].kind);
    CHECK(task.start_ms == Approx(expected[i].start));
    CHECK(task.end_ms == Approx(expected[i].end));
    CHECK(task.peer == expected[i].peer);
  }
  CHECK(std::string(task_kind_name(TaskKind::kAllreduce)) == "gradient allreduce");
}

TEST_CASE("a slow stage sets the steady state", "[simulate]") {
  std::vector<SimulatedStage> stages{{1.0, 1.0, 0.0, 0.0}, {3.0, 3.0, 0.0, 0.0}};
  auto result = simulate(stages, {1, 1}, 6, plan::Schedule::k1F1B);
  // Fill and drain of the fast stage (2 ms) plus six microbatches through the slow one.
  CHECK(result.iteration_ms == Approx(1.0 + 6 * 6.0 + 1.0));
}

}  // namespace rannc::partition

namespace rannc::partition {

TEST_CASE("interleaved 1F1B shrinks the bubble to (p - 1) / v of a group's time", "[simulate]") {
  // p = 4 groups, each of v = 2 chunks of 1 + 2 ms: a group's microbatch takes 6 ms, so 1F1B on
  // stages of the two chunks together takes (M + p - 1) 6 ms, and interleaved M 6 + (p - 1) 3.
  constexpr int kGroups = 4, kChunks = 2, kMicrobatches = 8;
  std::vector<SimulatedStage> chunks(kGroups * kChunks, SimulatedStage{1.0, 2.0, 0.0, 0.0});
  std::vector<int> replicas(chunks.size(), 1);
  auto interleaved = simulate(chunks, replicas, kMicrobatches, plan::Schedule::k1F1B, kChunks);
  std::vector<SimulatedStage> stages(kGroups, SimulatedStage{2.0, 4.0, 0.0, 0.0});
  auto plain = simulate(stages, std::vector<int>(kGroups, 1), kMicrobatches, plan::Schedule::k1F1B);
  CHECK(plain.iteration_ms == Approx((kMicrobatches + kGroups - 1) * 6.0));
  CHECK(interleaved.iteration_ms == Approx(kMicrobatches * 6.0 + (kGroups - 1) * 3.0));
  CHECK(interleaved.tasks.size() == chunks.size() * 2 * kMicrobatches);
  // The first group keeps the most: p + (p - 1) / v groups' worth, here 11 chunk-microbatches.
  CHECK(interleaved.max_in_flight[0] + interleaved.max_in_flight[kGroups] == 2 * kGroups + kGroups - 1);
  // The last, (v - 1) p + 1: its warm-up is the other chunks' first round.
  CHECK(interleaved.max_in_flight[kGroups - 1] + interleaved.max_in_flight[2 * kGroups - 1] == (kChunks - 1) * kGroups + 1);
}

TEST_CASE("an interleaved group synchronises its chunks' gradients one after another at the end", "[simulate]") {
  std::vector<SimulatedStage> chunks(4, SimulatedStage{1.0, 2.0, 0.0, 5.0});
  auto result = simulate(chunks, {1, 1, 1, 1}, 4, plan::Schedule::k1F1B, 2);
  double last_backward_of_group[2] = {0, 0};
  std::vector<std::pair<double, double>> allreduces[2];
  for (const auto& task : result.tasks) {
    if (task.kind == TaskKind::kBackward) last_backward_of_group[task.stage % 2] = std::max(last_backward_of_group[task.stage % 2], task.end_ms);
    if (task.kind == TaskKind::kAllreduce) allreduces[task.stage % 2].emplace_back(task.start_ms, task.end_ms);
  }
  for (int group = 0; group < 2; ++group) {
    REQUIRE(allreduces[group].size() == 2);
    CHECK(allreduces[group][0].first == Approx(last_backward_of_group[group]));
    CHECK(allreduces[group][1].first == Approx(allreduces[group][0].second));
    CHECK(result.finish_ms[group] == Approx(last_backward_of_group[group] + 10.0));
    CHECK(result.finish_ms[group + 2] == result.finish_ms[group]);
  }
}

}  // namespace rannc::partition
