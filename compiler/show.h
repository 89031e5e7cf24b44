// The show verb: a plan.json summarised for people (stages, ranks per node, predicted times and
// memory against the limit) or as a compact JSON object for scripts.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "emit/plan_file.h"

namespace rannc {

std::string show_text(const emit::PlanFile& plan);
nlohmann::json show_json(const emit::PlanFile& plan);

}  // namespace rannc
