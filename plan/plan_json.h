// plan.json: the Plan written out and read back, side by side. The writer is the only code that
// spells a field name for output; the reader checks every field a tool relies on, once, so a
// malformed, truncated or foreign file is one clear error line naming the file and the field
// ("plan.json: stages[1].inputs[0].source.stage: 3 is not an earlier stage"), never a crash.
//
// The same plan gives the same bytes: keys are sorted, numbers rounded (support/stable_number.h),
// and nothing depends on time or addresses.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.h"

namespace rannc::plan {

// The option enums go into any JSON by their names ("1f1b", "adam", "fp32"), never as numbers.
inline void to_json(nlohmann::json& json, Schedule schedule) { json = std::string(schedule_name(schedule)); }
inline void to_json(nlohmann::json& json, Optimizer optimizer) { json = std::string(optimizer_name(optimizer)); }
inline void to_json(nlohmann::json& json, Precision precision) { json = std::string(precision_name(precision)); }
inline void to_json(nlohmann::json& json, StateSharding sharding) { json = std::string(state_sharding_name(sharding)); }
inline void to_json(nlohmann::json& json, Fusion fusion) { json = std::string(fusion_name(fusion)); }
// "attention" and "elementwise", each only when fused (absent: unfused, and JSON as before).
inline void add_fused_kernels(nlohmann::json& json, Fusion attention, Fusion elementwise) {
  if (attention != Fusion::kUnfused) json["attention"] = attention;
  if (elementwise != Fusion::kUnfused) json["elementwise"] = elementwise;
}
// A stage's recompute: false (none) and true (full), as plans were before selective
// recomputation, or "selective".
inline void to_json(nlohmann::json& json, Recompute recompute) {
  if (recompute == Recompute::kSelective) json = std::string(recompute_name(recompute));
  else json = recompute == Recompute::kFull;
}

// Throws InputError naming the field when a number is NaN or infinite (JSON cannot hold it).
nlohmann::json to_json(const Plan& plan);
// A memory breakdown as plan.json writes it: {"weights", "grads", "optimizer", "activations",
// "workspace", "comm_buffers", "step_buffers", "total"} in bytes.
nlohmann::json memory_to_json(const MemoryBreakdown& memory);
// The step prediction as plan.json writes it; show and the partition summary print the same.
nlohmann::json prediction_to_json(const Prediction& predicted);
nlohmann::json generator_to_json(const Generator& generator);
// to_json, dumped as plan.json is written (one space of indent, a final newline).
std::string to_text(const Plan& plan);

// Checks and reads a document: "format" "rannc-plan", "version" 1, every field present with the
// right type, stage ids 0..S-1 in order, sources pointing at earlier stages' outputs, ranks
// covering 0..R-1 once. `path` names the document in errors and locates the stage files.
Plan from_json(const nlohmann::json& document, const std::string& path);

// from_json of a file, also refusing missing, non-regular, huge, deeply nested and invalid JSON.
Plan read_plan_file(const std::string& path);

// Throws InputError when a stage file is missing or (when the plan records its sha256) differs
// from the file partition wrote: "DIR/stage_1.pt does not match DIR/plan.json (sha256 ...);
// re-run partition". Without `check_sha256`, only that the file is there.
void check_stage_file(const Plan& plan, const Stage& stage, bool check_sha256 = true);
// The same for any file the plan names (`what` names it in the error); returns its path.
std::string check_plan_file(const Plan& plan, const PlanFile& file, const std::string& what, bool check_sha256 = true);
// Every stage's file; missing files are reported before any is hashed.
void check_stage_files(const Plan& plan);

}  // namespace rannc::plan
