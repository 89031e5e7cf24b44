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

namespace rannc {

struct PartitionOptions {
  std::string model_path;
  LoadOptions load;
  cost::ClusterFlags cluster;
  std::string out_dir = "rannc-out";
  std::string schedule = "1f1b";
  std::string optimizer = "adam";
  std::string precision = "fp32";
  std::optional<int> stages;
  std::optional<int> microbatches;
  std::string shard_state = "auto";  // auto, none or optimizer
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
};

struct PartitionReport {
  std::string plan_path;
  nlohmann::json summary;  // what --json prints
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
