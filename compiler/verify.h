// The verify verb: do the plan's stage files, chained, compute what the model computes?
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compiler/model.h"
#include "plan/plan_json.h"

namespace rannc {

struct VerifyOptions {
  std::string plan_path;
  std::optional<std::string> model_path;  // default: the plan's model path
  double tolerance = 1e-5;                // on the relative difference of every output and gradient
  std::uint64_t seed = 0;
  // The model in float32 (the reference) is itself checked against the model in float64 when
  // its weights take at most this much in float64.
  std::int64_t float64_limit_bytes = std::int64_t{2} << 30;
};

struct VerifyOutcome {
  bool passed = false;
  nlohmann::json summary;  // what --json prints
  std::string text;
};

// Throws InputError for an unreadable or mismatched plan, model or stage file.
VerifyOutcome run_verify(const VerifyOptions& options);

// partition's check of the stage files it has just written, before plan.json names them (the
// tensor ranks' files too, as verify chains them): the plan is chained on a small workload (at
// most two microbatches, one sample per replica slice of the widest stage) against `model`.
// Throws Error when a stage file differs from the model, with the worst tensor; a model with
// random ops in training mode is not compared (`line` says so).
// The model in float32 differing from float64 (when its weights in float64 take at most
// `float64_limit_bytes`) is a warning in `line`: the stage files compute what the model does.
struct StageCheck {
  bool compared = false;
  std::string line;        // for the partition summary
  nlohmann::json summary;  // for --json
};
StageCheck check_stage_files(const Model& model, const plan::Plan& plan, double tolerance,
                             std::int64_t float64_limit_bytes);

}  // namespace rannc
