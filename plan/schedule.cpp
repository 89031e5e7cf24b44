#include "plan/schedule.h"

#include <algorithm>
#include <stdexcept>

#include "support/named_choice.h"

namespace rannc::plan {
namespace {

// Forwards a stage runs before its first backward.
int warmup_forwards(Schedule schedule, int stages_after, int microbatches) {
  return schedule == Schedule::kGPipe ? microbatches : std::min(stages_after, microbatches);
}

}  // namespace

std::string_view schedule_name(Schedule schedule) { return schedule == Schedule::kGPipe ? "gpipe" : "1f1b"; }

std::string schedule_label(Schedule schedule, int chunks) {
  std::string label(schedule_name(schedule));
  return chunks > 1 ? label + " interleaved x" + std::to_string(chunks) : label;
}

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

std::vector<PassTask> group_passes(int groups, int group, int chunks, int microbatches) {
  if (chunks == 1) return stage_passes(Schedule::k1F1B, groups - 1 - group, microbatches);
  if (groups < 1 || microbatches % groups != 0)
    throw std::invalid_argument("interleaved 1F1B needs a multiple of the stage count of microbatches");
  const int total = chunks * microbatches;
  // The k-th forward (backward) of the group: microbatches go in rounds of `groups`, each round
  // over every chunk in turn (backwards from the last chunk).
  auto task = [&](Pass pass, int k) {
    int round = k / (groups * chunks), within = k % (groups * chunks);
    int chunk = within / groups;
    if (pass == Pass::kBackward) chunk = chunks - 1 - chunk;
    return PassTask{pass, round * groups + within % groups, chunk};
  };
  const int warmup = microbatches == groups ? total : std::min(2 * (groups - 1 - group) + (chunks - 1) * groups, total);
  std::vector<PassTask> tasks;
  tasks.reserve(2 * static_cast<std::size_t>(total));
  for (int k = 0; k < warmup; ++k) tasks.push_back(task(Pass::kForward, k));
  for (int k = 0; k + warmup < total; ++k) {
    tasks.push_back(task(Pass::kForward, warmup + k));
    tasks.push_back(task(Pass::kBackward, k));
  }
  for (int k = std::max(total - warmup, 0); k < total; ++k) tasks.push_back(task(Pass::kBackward, k));
  return tasks;
}

std::vector<int> chunks_in_flight_at_peak(int groups, int group, int chunks, int microbatches) {
  std::vector<int> now(static_cast<std::size_t>(chunks), 0), at_peak = now;
  int in_flight = 0, most = 0;
  for (const auto& task : group_passes(groups, group, chunks, microbatches)) {
    bool forward = task.pass == Pass::kForward;
    now[static_cast<std::size_t>(task.chunk)] += forward ? 1 : -1;
    in_flight += forward ? 1 : -1;
    if (in_flight > most) most = in_flight, at_peak = now;
  }
  return at_peak;
}

}  // namespace rannc::plan
