#include "support/stable_number.h"

#include <cmath>
#include <cstdint>

namespace rannc {

nlohmann::json stable_number(double x) {
  double rounded = std::round(x * 1e6) / 1e6;
  if (rounded == std::floor(rounded) && std::abs(rounded) < 1e15) return static_cast<std::int64_t>(rounded);
  return rounded;
}

}  // namespace rannc
