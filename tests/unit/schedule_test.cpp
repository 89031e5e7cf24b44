// The one schedule module: pass order and in-flight count of each schedule, as the memory model,
// the search, the simulator and the runtime all read them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "plan/schedule.h"
#include "support/error.h"

namespace rannc::plan {
namespace {

std::string passes(const std::vector<PassTask>& tasks) {
  std::string text;
  for (const auto& t : tasks) text += (t.pass == Pass::kForward ? "F" : "B") + std::to_string(t.microbatch) + " ";
  return text;
}

}  // namespace

TEST_CASE("1F1B fills the pipeline then alternates, and GPipe runs all forwards first", "[schedule]") {
  CHECK(passes(stage_passes(Schedule::k1F1B, 2, 4)) == "F0 F1 F2 B0 F3 B1 B2 B3 ");
  CHECK(passes(stage_passes(Schedule::k1F1B, 0, 4)) == "F0 B0 F1 B1 F2 B2 F3 B3 ");
  CHECK(passes(stage_passes(Schedule::k1F1B, 3, 2)) == "F0 F1 B0 B1 ");
  CHECK(passes(stage_passes(Schedule::kGPipe, 1, 3)) == "F0 F1 F2 B0 B1 B2 ");
}

TEST_CASE("schedule names round-trip and an unknown one is refused naming the option", "[schedule]") {
  for (auto schedule : {Schedule::k1F1B, Schedule::kGPipe})
    CHECK(parse_schedule(schedule_name(schedule), "--schedule") == schedule);
  CHECK_THROWS_WITH(parse_schedule("interleaved", "--schedule"),
                    Catch::Contains("--schedule interleaved: unknown schedule"));
}

TEST_CASE("every schedule runs each pass once, backward after forward, within its in-flight count",
          "[schedule]") {
  for (auto schedule : {Schedule::k1F1B, Schedule::kGPipe}) {
    for (int stages = 1; stages <= 5; ++stages) {
      for (int microbatches = 1; microbatches <= 8; ++microbatches) {
        for (int stage = 0; stage < stages; ++stage) {
          int after = stages - 1 - stage;
          std::map<int, int> forwards, backwards;
          int in_flight = 0, most = 0;
          for (const auto& task : stage_passes(schedule, after, microbatches)) {
            if (task.pass == Pass::kForward) {
              ++forwards[task.microbatch];
              most = std::max(most, ++in_flight);
            } else {
              REQUIRE(forwards.count(task.microbatch) == 1);
              ++backwards[task.microbatch];
              --in_flight;
            }
          }
          REQUIRE(forwards.size() == static_cast<std::size_t>(microbatches));
          REQUIRE(backwards.size() == static_cast<std::size_t>(microbatches));
          for (const auto& [mb, count] : backwards) REQUIRE((count == 1 && forwards[mb] == 1));
          // The memory model's count is exactly what the pass order keeps.
          REQUIRE(most == microbatches_in_flight(schedule, after, microbatches));
        }
      }
    }
  }
}

TEST_CASE("the in-flight count follows the schedule", "[schedule]") {
  CHECK(microbatches_in_flight(Schedule::k1F1B, 0, 8) == 1);
  CHECK(microbatches_in_flight(Schedule::k1F1B, 3, 8) == 4);
  CHECK(microbatches_in_flight(Schedule::k1F1B, 20, 8) == 8);
  CHECK(microbatches_in_flight(Schedule::kGPipe, 0, 8) == 8);
}

TEST_CASE("interleaved 1F1B runs each chunk's passes once in Megatron-LM's order", "[schedule]") {
  auto text = [](const std::vector<PassTask>& tasks) {
    std::string out;
    for (const auto& t : tasks)
      out += (t.pass == Pass::kForward ? "F" : "B") + std::to_string(t.microbatch) + "c" + std::to_string(t.chunk) + " ";
    return out;
  };
  // 2 groups of 2 chunks, 4 microbatches: the last group warms up with one round of its first
  // chunk (v - 1) p = 2, the first with 2 more.
  CHECK(text(group_passes(2, 1, 2, 4)) ==
        "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 B2c0 B3c0 ");
  CHECK(text(group_passes(2, 0, 2, 4)).rfind("F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 ", 0) == 0);
  // As many microbatches as groups: every forward first.
  CHECK(text(group_passes(2, 1, 2, 2)) == "F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0 ");
  // One chunk is plain 1F1B.
  CHECK(group_passes(3, 0, 1, 6) == stage_passes(Schedule::k1F1B, 2, 6));
  CHECK_THROWS_AS(group_passes(4, 0, 2, 6), std::invalid_argument);

  for (int groups = 1; groups <= 4; ++groups)
    for (int chunks = 2; chunks <= 4; ++chunks)
      for (int microbatches = groups; microbatches <= 3 * groups; microbatches += groups)
        for (int group = 0; group < groups; ++group) {
          INFO(groups << " groups, " << chunks << " chunks, " << microbatches << " microbatches, group " << group);
          std::map<std::pair<int, int>, int> forwards, backwards;
          std::vector<int> now(chunks, 0);
          int in_flight = 0, most = 0;
          for (const auto& task : group_passes(groups, group, chunks, microbatches)) {
            auto key = std::make_pair(task.chunk, task.microbatch);
            if (task.pass == Pass::kForward) {
              ++forwards[key];
              ++now[task.chunk];
              most = std::max(most, ++in_flight);
            } else {
              REQUIRE(forwards.count(key) == 1);
              ++backwards[key];
              --now[task.chunk];
              --in_flight;
            }
          }
          REQUIRE(forwards.size() == static_cast<std::size_t>(chunks * microbatches));
          REQUIRE(backwards.size() == forwards.size());
          for (const auto& [key, count] : backwards) REQUIRE((count == 1 && forwards[key] == 1));
          auto peak = chunks_in_flight_at_peak(groups, group, chunks, microbatches);
          int at_peak = 0;
          for (int count : peak) at_peak += count;
          REQUIRE(at_peak == most);
          // Narayanan et al.'s count: warm-up plus one, all of them when M = p.
          int warmup = microbatches == groups ? chunks * microbatches
                                              : std::min(2 * (groups - 1 - group) + (chunks - 1) * groups, chunks * microbatches);
          REQUIRE(most == std::min(warmup + 1, chunks * microbatches));
        }
}

}  // namespace rannc::plan
