// The training options a plan is made for: the optimizer (how much state each weight carries)
// and the numeric precision. The schedule has its own module (plan/schedule.h). Names are the
// spellings of the CLI and of plan.json.
#pragma once

#include <cstdint>
#include <string_view>

namespace rannc::plan {

enum class Optimizer : std::uint8_t { kSgd, kMomentum, kAdam };
std::string_view optimizer_name(Optimizer optimizer);
// Throws InputError "WHAT NAME: unknown optimizer (known: sgd, momentum, adam)".
Optimizer parse_optimizer(std::string_view name, std::string_view what);

// Mixed precision: 16-bit weights and activations beside fp32 master weights.
enum class Precision : std::uint8_t { kFp32, kBf16Mixed, kFp16Mixed };
std::string_view precision_name(Precision precision);
Precision parse_precision(std::string_view name, std::string_view what);

}  // namespace rannc::plan
