// The verify verb: do the plan's stage files, chained, compute what the model computes?
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace rannc {

struct VerifyOptions {
  std::string plan_path;
  std::optional<std::string> model_path;  // default: the plan's model path
  double tolerance = 1e-5;                // on the relative difference of every output and gradient
  std::uint64_t seed = 0;
};

struct VerifyOutcome {
  bool passed = false;
  nlohmann::json summary;  // what --json prints
  std::string text;
};

// Throws InputError for an unreadable or mismatched plan, model or stage file.
VerifyOutcome run_verify(const VerifyOptions& options);

}  // namespace rannc
