// `rannc-partition inspect`: what a model holds, as a table or as the JSON of docs/contract.md.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compiler/model.h"
#include "cost_model/memory.h"
#include "cost_model/profile_db.h"

namespace rannc {

// With --device: predict a training step of the whole model on one device of that kind.
struct CostQuery {
  cost::DeviceSpec device;
  plan::Precision precision = plan::Precision::kFp32;
  plan::Optimizer optimizer = plan::Optimizer::kAdam;
  std::optional<cost::ProfileDb> profile_db;
  // How the training stack runs attention cores and elementwise ops (partition's --attention and
  // --elementwise).
  plan::Fusion attention = plan::Fusion::kUnfused;
  plan::Fusion elementwise = plan::Fusion::kUnfused;
};

// `cost` may be null; then there is no "predicted" section.
nlohmann::json inspect_json(const Model& model, const CostQuery* cost);

// The same facts as inspect_json, laid out for a terminal.
std::string inspect_text(const Model& model, const CostQuery* cost);

}  // namespace rannc
