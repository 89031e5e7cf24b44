// The order in which one pipeline stage runs the forward and backward passes of a step's
// microbatches (GPipe: all forwards, then all backwards; 1F1B: a few forwards to fill the
// pipeline, then one backward per forward, which bounds the activations kept in flight).
#pragma once

#include <string>
#include <vector>

namespace rannc::runtime {

enum class Pass { kForward, kBackward };

struct PassTask {
  Pass pass;
  int microbatch;
};

// `schedule` is the plan's "1f1b" or "gpipe"; throws InputError for anything else.
std::vector<PassTask> stage_tasks(const std::string& schedule, int stage, int stages, int microbatches);

}  // namespace rannc::runtime
