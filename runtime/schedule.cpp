#include "runtime/schedule.h"

#include <algorithm>

#include "support/error.h"

namespace rannc::runtime {

std::vector<PassTask> stage_tasks(const std::string& schedule, int stage, int stages, int microbatches) {
  if (schedule != "1f1b" && schedule != "gpipe") throw InputError("schedule '" + schedule + "' is not 1f1b or gpipe");
  // GPipe is 1F1B whose warm-up covers every microbatch.
  int warmup = schedule == "gpipe" ? microbatches : std::min(stages - stage - 1, microbatches);
  std::vector<PassTask> tasks;
  for (int mb = 0; mb < warmup; ++mb) tasks.push_back({Pass::kForward, mb});
  for (int mb = warmup; mb < microbatches; ++mb) {
    tasks.push_back({Pass::kForward, mb});
    tasks.push_back({Pass::kBackward, mb - warmup});
  }
  for (int mb = microbatches - warmup; mb < microbatches; ++mb) tasks.push_back({Pass::kBackward, mb});
  return tasks;
}

}  // namespace rannc::runtime
