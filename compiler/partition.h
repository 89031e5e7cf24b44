// The partition verb (the default): load the model, cost it on the cluster's device, plan,
// write OUT/plan.json and report the plan as a table or as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "compiler/model.h"
#include "compiler/sharded_partition.h"
#include "cost_model/cluster.h"
#include "partitioner/planner.h"
#include "support/progress.h"

namespace rannc {

struct PartitionOptions {
  std::string model_path;
  LoadOptions load;
  cost::ClusterFlags cluster;
  std::string out_dir = "rannc-out";
  std::string schedule = "1f1b";
  std::string optimizer = "adam";
  std::string precision = "fp32";
  std::string attention = "unfused";    // unfused or fused: how the training stack runs attention cores
  std::string elementwise = "unfused";  // and connected elementwise ops
  std::optional<int> stages;
  std::optional<int> microbatches;
  std::string shard_state = "auto";  // auto, none or optimizer
  std::string recompute = "auto";    // auto, none, selective or full
  // --tensor-parallel: the largest tensor-parallel degree (1: none); by default a node's devices
  // on a GPU, 1 on the CPU (plans rannc-run trains there).
  std::optional<int> tensor_parallel;
  std::string sequence_parallel = "on";  // on or off: sequence parallelism with tensor parallelism
  // --context-parallel: the largest context-parallel degree the search considers (1, the default:
  // none; rannc-run does not run context parallelism).
  int context_parallel = 1;
  std::string profile_db;
  ShardingOptions sharding;  // models with pooled embedding tables
  bool plan_only = false;  // write plan.json without stage files
  // partition checks the stage files against the model before writing plan.json, when the
  // weights take at most check_limit_bytes (the check runs the model on this machine).
  bool check = true;
  std::int64_t check_limit_bytes = std::int64_t{2} << 30;
  // Where launch.sh and job.sbatch look for rannc-run after $RANNC_RUN and before PATH: the
  // folder of the running rannc-partition, which rannc-run is built and installed beside.
  std::string runtime_folder;
  // Recorded in plan.json: this tool, its version and the command line.
  std::optional<plan::Generator> generator;
  bool explain = false;  // --explain: the layouts that lost and what ruled out the rest
  std::string layout;    // --layout pp=8,dp=8[,m=16][,tp=8]: plan exactly this layout, beside the free plan
  Progress progress;     // phase lines on stderr
};

// --layout, read: pipeline stages, pipeline replicas and (optionally) microbatches.
struct ForcedLayout {
  int stages = 0;
  int pipelines = 0;
  std::optional<int> microbatches;
  int tensor_degree = 1;  // tp= (1 when not given): every stage's
  int chunks = 1;         // vp= (1 when not given): model chunks per device group (interleaved 1F1B)
  int context_degree = 1; // cp= (1 when not given): every stage's context-parallel degree
};
// Throws InputError naming what is wrong: a malformed item, a tp x cp that does not divide a
// node's devices, or a layout whose stages x pipelines x tp x cp is not the job's device count.
ForcedLayout parse_layout(const std::string& text, int devices, int devices_per_node);

struct PartitionReport {
  std::string plan_path;
  nlohmann::json summary;  // what --json prints: show --json's object and "planning"
  std::string text;        // the table printed otherwise
};

// Throws InputError for bad options or input, Error(kCannotMeet) when no plan fits.
PartitionReport run_partition(const PartitionOptions& options);

// The planner's request from the options, every option checked before the model is read (so a
// typo fails fast); set_model_batch completes it once the model is loaded (--batch or the
// model's, and the microbatch of a model that runs only at one batch).
partition::PlanRequest plan_request(const PartitionOptions& options);
void set_model_batch(partition::PlanRequest& request, const PartitionOptions& options, const Model& model);

}  // namespace rannc
