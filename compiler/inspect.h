// `rannc-partition inspect`: what a model holds, as a table or as the JSON of CONTRACT.md.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "compiler/model.h"

namespace rannc {

nlohmann::json inspect_json(const Model& model);

// The same facts as inspect_json, laid out for a terminal.
std::string inspect_text(const Model& model);

}  // namespace rannc
