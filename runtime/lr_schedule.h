// The learning rate of each step: a linear warm-up, then constant, linear or cosine decay to 0 at
// the last step, as Hugging Face's get_{constant,linear,cosine}_schedule_with_warmup define them
// (step 0 of a warm-up trains at 0). Plain arithmetic, no torch.
#pragma once

#include <string_view>

namespace rannc::runtime {

enum class LrSchedule { kConstant, kLinear, kCosine };

// Throws InputError "--lr-schedule NAME: unknown (known: constant, linear, cosine)".
LrSchedule parse_lr_schedule(std::string_view name);

// The factor of the base learning rate at `step` (0-based) of `total_steps`, after
// `warmup_steps` steps of linear warm-up.
double lr_factor(LrSchedule schedule, int step, int warmup_steps, int total_steps);

}  // namespace rannc::runtime
