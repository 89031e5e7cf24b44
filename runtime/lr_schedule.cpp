#include "runtime/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "support/error.h"
#include "support/input_file.h"

namespace rannc::runtime {

LrSchedule parse_lr_schedule(std::string_view name) {
  if (name == "constant") return LrSchedule::kConstant;
  if (name == "linear") return LrSchedule::kLinear;
  if (name == "cosine") return LrSchedule::kCosine;
  throw InputError("--lr-schedule " + text_excerpt(name) + ": unknown (known: constant, linear, cosine)");
}

double lr_factor(LrSchedule schedule, int step, int warmup_steps, int total_steps) {
  if (step < warmup_steps) return static_cast<double>(step) / warmup_steps;
  if (schedule == LrSchedule::kConstant) return 1.0;
  double span = std::max(1, total_steps - warmup_steps);
  double progress = (step - warmup_steps) / span;
  if (schedule == LrSchedule::kLinear) return std::max(0.0, 1.0 - progress);
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace rannc::runtime
