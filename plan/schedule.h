// What a pipeline schedule means, written once for everyone who needs it: the memory model
// (microbatches kept in flight), the stage search, the simulator and the runtime (the order of
// passes).
//
//   GPipe: every forward, then every backward: all microbatches are in flight at once.
//   1F1B:  a stage with k stages after it runs min(k, M) warm-up forwards, then alternates one
//          forward and one backward, then drains the remaining backwards: at most k + 1
//          microbatches are in flight, fewer on later stages.
//
// GPipe is 1F1B whose warm-up covers every microbatch.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace rannc::plan {

enum class Schedule : std::uint8_t { k1F1B, kGPipe };
std::string_view schedule_name(Schedule schedule);
// Throws InputError "WHAT NAME: unknown schedule (known: 1f1b, gpipe)".
Schedule parse_schedule(std::string_view name, std::string_view what);

enum class Pass : std::uint8_t { kForward, kBackward };

struct PassTask {
  Pass pass = Pass::kForward;
  int microbatch = 0;
  bool operator==(const PassTask& other) const { return pass == other.pass && microbatch == other.microbatch; }
};

// The passes of one step on a stage followed by `stages_after` stages, in the order it runs them.
std::vector<PassTask> stage_passes(Schedule schedule, int stages_after, int microbatches);

// The most microbatches that stage keeps between their forward and their backward.
int microbatches_in_flight(Schedule schedule, int stages_after, int microbatches);

}  // namespace rannc::plan
