// Recommendation models (DLRM): a model whose embedding tables pool bags of lookups is planned
// the way large-scale systems train it, not as a pipeline: the tables sharded over the devices
// (sharding/sharding_planner.h), the dense part data-parallel on every device (one stage).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "cost_model/profile_db.h"
#include "emit/stage_layout.h"
#include "partitioner/planner.h"
#include "plan/plan.h"
#include "sharding/embedding_tables.h"

namespace rannc {

// The choices a sharded plan adds to the partition options (the CLI's spelling).
struct ShardingOptions {
  bool enabled = true;            // --no-table-sharding: pooled tables are ops of the pipeline like any other
  std::string table_constraints;  // --table-constraints FILE ("": none)
  std::string comm_dtype = "fp32";
  std::string comm_dtype_bwd;     // "": as comm_dtype
  std::string sparse_optimizer = "rowwise_adagrad";
};

// Checks the names before the model is read, so that a typo fails fast.
void check_sharding_options(const ShardingOptions& options);

// A sharded plan is made for a model with at least one pooled table (sum, mean or max of its
// lookups per sample), or when table constraints are given; never with --no-table-sharding.
bool wants_sharded_plan(const std::vector<sharding::EmbeddingTable>& tables, const ShardingOptions& options);

// The files of a sharded plan beside plan.json (plan-format.md, "sharding"): stage_0.pt (the
// dense part), these two, and shards_<rank>.pt.
inline constexpr const char* kIndicesFile = "sharding_indices.pt";
inline constexpr const char* kTablesFile = "sharding_tables.pt";

struct ShardedPlan {
  plan::Plan plan;          // without a path
  nlohmann::json summary;   // partition's --json fields beside the prediction
  // What the files are made of: the dense part, the ops computing each table's indices from
  // the model inputs, and the lookups (empty when a table is looked up more than once).
  emit::StageLayout dense, indices, tables;
  std::vector<std::vector<int>> lookup_args;  // per table: its lookup's tensor inputs among tables.inputs
  std::string unwritable;  // why the files cannot be written ("" when they can)
};

// Writes the files into `folder` and records them (with their SHA-256) in the plan.
void write_sharded_files(const Model& model, ShardedPlan& sharded, const std::string& folder);

// Throws Error(kCannotMeet) with what the tables need against what the cluster has when nothing
// fits, InputError for bad options (a batch the devices do not divide, bad constraints).
ShardedPlan plan_sharded(const Model& model, std::vector<sharding::EmbeddingTable> tables, const ShardingOptions& options,
                         const partition::PlanRequest& request, const cost::ProfileDb* profile_db, const std::string& model_path);

}  // namespace rannc
