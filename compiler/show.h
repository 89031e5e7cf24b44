// The show verb: a plan.json summarised for people (stages, ranks per node, predicted times and
// memory against the limit) or as a compact JSON object for scripts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan_json.h"

namespace rannc {

std::string show_text(const plan::Plan& plan);
nlohmann::json show_json(const plan::Plan& plan);

}  // namespace rannc
