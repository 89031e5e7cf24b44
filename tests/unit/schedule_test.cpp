// The one schedule module: pass order and in-flight count of each schedule, as the memory model,
// the search, the simulator and the runtime all read them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
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

}  // namespace rannc::plan
