// plan.json (format "rannc-plan", version 1; CONTRACT.md): what every rank and the user's tools
// read. The same inputs give the same bytes: numbers are rounded (support/stable_number.h),
// keys are sorted and nothing depends on time or addresses.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ir/graph.h"
#include "emit/stage_layout.h"
#include "partitioner/planner.h"

namespace rannc::emit {

// What plan.json records of the model file.
struct ModelFacts {
  std::string path;
  std::string sha256;
  std::string format;             // "onnx" or "torchscript"
  std::int64_t evaluated_batch = 1;
};

inline constexpr const char* kPlanFormat = "rannc-plan";
inline constexpr int kPlanVersion = 1;

// Throws InputError naming the field when a number came out NaN or infinite.
nlohmann::json plan_to_json(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                            const partition::PlanResult& result, const std::vector<StageLayout>& layouts);

}  // namespace rannc::emit
