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
//
//   Interleaved 1F1B (Narayanan et al., SC21): each of p device groups holds v model chunks,
//          chunk c of the model (of p x v, in model order) on group c mod p. A group runs the
//          forwards of p microbatches on its first chunk, then on its second, ..., and the
//          backwards in the same groups of p from its last chunk back; its warm-up is
//          2 (p - 1 - group) + (v - 1) p forwards (all of them when M = p). The pipeline's fill
//          and drain then take 1/v of 1F1B's. M must be a multiple of p.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rannc::plan {

enum class Schedule : std::uint8_t { k1F1B, kGPipe };
std::string_view schedule_name(Schedule schedule);
// Throws InputError "WHAT NAME: unknown schedule (known: 1f1b, gpipe)".
Schedule parse_schedule(std::string_view name, std::string_view what);

// For people: "1f1b", "gpipe", or with model chunks per device group "1f1b interleaved x2".
std::string schedule_label(Schedule schedule, int chunks);

enum class Pass : std::uint8_t { kForward, kBackward };

struct PassTask {
  Pass pass = Pass::kForward;
  int microbatch = 0;
  int chunk = 0;  // interleaved: which of the group's chunks (0 .. v-1, in model order); else 0
  bool operator==(const PassTask& other) const {
    return pass == other.pass && microbatch == other.microbatch && chunk == other.chunk;
  }
};

// The passes of one step on a stage followed by `stages_after` stages, in the order it runs them.
std::vector<PassTask> stage_passes(Schedule schedule, int stages_after, int microbatches);

// The most microbatches that stage keeps between their forward and their backward.
int microbatches_in_flight(Schedule schedule, int stages_after, int microbatches);

// Interleaved 1F1B: the passes of group `group` of `groups`, each holding `chunks` chunks, in
// the order it runs them. One chunk is stage_passes(k1F1B, groups - 1 - group, microbatches).
// Throws std::invalid_argument unless microbatches is a multiple of groups.
std::vector<PassTask> group_passes(int groups, int group, int chunks, int microbatches);

// The microbatches each of the group's chunks keeps between forward and backward at the moment
// the group keeps the most chunk-microbatches in all (the memory peak of equal chunks).
std::vector<int> chunks_in_flight_at_peak(int groups, int group, int chunks, int microbatches);

}  // namespace rannc::plan
