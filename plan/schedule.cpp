#include "plan/schedule.h"

#include <algorithm>

#include "support/named_choice.h"

namespace rannc::plan {
namespace {

// Forwards a stage runs before its first backward.
int warmup_forwards(Schedule schedule, int stages_after, int microbatches) {
  return schedule == Schedule::kGPipe ? microbatches : std::min(stages_after, microbatches);
}

}  // namespace

std::string_view schedule_name(Schedule schedule) { return schedule == Schedule::kGPipe ? "gpipe" : "1f1b"; }

Schedule parse_schedule(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "schedule", {Schedule::k1F1B, Schedule::kGPipe}, schedule_name);
}

std::vector<PassTask> stage_passes(Schedule schedule, int stages_after, int microbatches) {
  int warmup = warmup_forwards(schedule, stages_after, microbatches);
  std::vector<PassTask> tasks;
  tasks.reserve(2 * static_cast<std::size_t>(std::max(microbatches, 0)));
  for (int mb = 0; mb < warmup; ++mb) tasks.push_back({Pass::kForward, mb});
  for (int mb = warmup; mb < microbatches; ++mb) {
    tasks.push_back({Pass::kForward, mb});
    tasks.push_back({Pass::kBackward, mb - warmup});
  }
  for (int mb = microbatches - warmup; mb < microbatches; ++mb) tasks.push_back({Pass::kBackward, mb});
  return tasks;
}

int microbatches_in_flight(Schedule schedule, int stages_after, int microbatches) {
  // The warm-up forwards, plus the one whose backward follows it directly.
  return std::min(warmup_forwards(schedule, stages_after, microbatches) + 1, microbatches);
}

}  // namespace rannc::plan
