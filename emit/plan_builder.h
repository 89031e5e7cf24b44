// The Plan from what partition derived: the model graph, the planner's chosen pipeline and the
// stage layouts. The one place where planner and IR terms become plan terms.
#pragma once

#include <string>
#include <vector>

#include "emit/stage_layout.h"
#include "ir/graph.h"
#include "partitioner/planner.h"
#include "plan/plan.h"

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

}  // namespace rannc::emit
