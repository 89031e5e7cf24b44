// Reading plan.json back (show, verify, rannc-run). Every field a reader relies on is checked
// here, once, so a malformed, truncated or foreign file is one clear error line that names the
// file and the field, never a crash deeper in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rannc::emit {

struct PlanTensor {
  std::string name;
  std::vector<std::int64_t> shape;  // per microbatch per replica
  std::string dtype;                // ir::dtype_name spelling, "float32", "int64", ...
  int batch_dim = -1;               // -1: not sliced among replicas
  std::int64_t index_bound = 0;     // integer model inputs: values valid below it (0: not given)
  // Inputs only: where the tensor comes from.
  std::optional<std::string> model_input;  // set for a model input
  int from_stage = -1, from_output = -1;   // set otherwise
  // Outputs only.
  bool model_output = false;
};

struct PlanWeight {
  std::string name;         // qualified name in the model ("blocks.0.qkv.weight")
  std::string stage_name;   // attribute name in the stage module ("p3", "b0")
  std::int64_t numel = 0, bytes = 0;
  std::vector<int> shared_with;  // other stages holding the same (tied) weight
};

struct PlanStage {
  int id = 0;
  std::string file;          // as written in the plan (relative to the plan's folder)
  std::string sha256;        // of the stage file, as partition wrote it ("" in --plan-only plans)
  std::vector<int> ranks;
  int replicas_per_pipeline = 1;
  std::vector<PlanTensor> inputs, outputs;
  std::vector<PlanWeight> params, buffers;
  bool recompute = false, offload = false;
  double predicted_fwd_ms = 0, predicted_bwd_ms = 0, predicted_mem_bytes = 0;
  // Optional extras of this project's plans (absent: empty or 0).
  std::string op_range;                  // "first op .. last op"
  std::vector<int> blocks;               // [begin, end) of the block sequence
  double predicted_p2p_ms = 0, predicted_allreduce_ms = 0;
  int in_flight = 0;                     // microbatches kept between forward and backward
};

struct PlanRank {
  int rank = 0, node = 0, local_rank = 0, stage = 0, replica = 0;
};

struct PlanFile {
  std::string path;      // the plan.json read
  std::string folder;    // its folder: stage files are relative to it
  nlohmann::json json;   // the whole document, for readers that print more than the fields below

  std::string model_path, model_sha256, model_format;
  std::int64_t model_params = 0, evaluated_batch = 1;
  std::vector<PlanTensor> model_inputs;  // the example inputs, at the evaluated batch

  int gpus = 1, gpus_per_node = 1, nodes = 1;
  std::int64_t mem_bytes = 0;
  std::string device;

  std::int64_t global_batch = 1;
  int pipelines = 1, microbatches = 1, microbatch_size = 1;
  std::string schedule;   // "1f1b" | "gpipe"
  std::string optimizer;  // "sgd" | "momentum" | "adam"
  std::string precision = "fp32";

  std::vector<PlanStage> stages;
  std::vector<PlanRank> ranks;

  double iteration_ms = 0, peak_mem_bytes = 0;
  double samples_per_s = 0, bubble_fraction = 0, lower_bound_ms = 0;
  double efficiency = 0;  // lower_bound_ms / iteration_ms
  std::vector<int> unused_ranks;  // devices of the cluster that carry no stage
  std::string unused_reason;

  // The stage file's path on disk.
  std::string stage_path(const PlanStage& stage) const;
};

// Reads and checks a plan: readable JSON object, "format" "rannc-plan", "version" 1, every
// field above present with the right type, stage ids 0..S-1 in order, sources pointing at
// earlier stages' outputs, ranks covering 0..R-1 once. Throws InputError naming the file and
// the first problem ("plan.json: stages[1].inputs[0].source.stage: 3 is not an earlier stage").
PlanFile read_plan_file(const std::string& path);

// The same checks on a document already in memory (the partition verb, on what it wrote);
// `path` names it in errors and locates the stage files.
PlanFile plan_from_json(nlohmann::json document, const std::string& path);

// Throws InputError when a stage file named by the plan is missing, or (when the plan records
// its sha256) differs from the file partition wrote: "DIR/stage_1.pt does not match
// DIR/plan.json (sha256 ...); re-run partition". Missing files are reported before any is hashed.
void check_stage_files_exist(const PlanFile& plan);
// The same for one stage (a rank of rannc-run reads only its own); without `check_sha256`,
// only that the file is there.
void check_stage_file(const PlanFile& plan, const PlanStage& stage, bool check_sha256 = true);

}  // namespace rannc::emit
