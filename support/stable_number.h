// Numbers written into JSON outputs (plan.json, cluster dumps): rounded to 6 decimals, and
// whole values written as integers, so the same inputs give byte-identical files.
#pragma once

#include <nlohmann/json.hpp>

namespace rannc {

nlohmann::json stable_number(double x);

}  // namespace rannc
