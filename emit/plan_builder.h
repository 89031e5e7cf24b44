// The Plan from what partition derived: the model graph, the planner's chosen pipeline and the
// stage layouts. The one place where planner and IR terms become plan terms.
#pragma once

#include <string>
#include <vector>

#include "emit/stage_layout.h"
#include "ir/graph.h"
#include "partitioner/planner.h"
#include "plan/plan.h"
#include "sharding/dense_part.h"
#include "sharding/sharding_planner.h"

namespace rannc::emit {

// What the plan records of the model file.
struct ModelFacts {
  std::string path;
  std::string sha256;
  std::string format;  // "onnx" or "torchscript"
  std::int64_t evaluated_batch = 1;
};

// What the plan records of the cluster: its size, memory, device name and links.
plan::Cluster plan_cluster(const cost::Cluster& cluster);

// Stage files are left without sha256 (partition adds them once written); `plan.path` is empty.
plan::Plan build_plan(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                      const partition::PlanResult& result, const std::vector<StageLayout>& layouts);

// A recommendation model planned with its embedding tables sharded (sharding/): the tables, the
// problem they were planned as, the planner's placement and the dense part.
struct ShardedModel {
  const std::vector<sharding::EmbeddingTable>& tables;
  const sharding::ShardingProblem& problem;
  const sharding::ShardingSolution& solution;
  const sharding::DensePart& dense;
  std::string comm_dtype, comm_dtype_bwd;  // "fp32", "fp16" or "bf16"
};

// One stage, the dense part (`dense_layout`), on every rank; the tables in the plan's sharding
// section. The batch is the problem's batch per rank times the ranks.
plan::Plan build_sharded_plan(const ir::Graph& graph, const ModelFacts& model, const partition::PlanRequest& request,
                              const StageLayout& dense_layout, const ShardedModel& sharded);

}  // namespace rannc::emit
