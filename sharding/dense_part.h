// The dense part of a recommendation model: the ops its outputs are computed from, given the
// embedding tables' pooled lookups (the MLPs, the feature interaction, the loss). A sharded plan runs it data-parallel on every rank at the
// rank's share of the batch; its compute, gradient allreduce and memory are the same on each
// rank, the base every rank's embedding load is added to.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/cluster.h"
#include "cost_model/cost_model.h"
#include "ir/graph.h"
#include "plan/plan.h"
#include "sharding/embedding_tables.h"

namespace rannc::sharding {

struct DensePart {
  std::vector<ir::OpId> ops;  // ascending
  double param_elements = 0;
  double fwd_ms = 0, bwd_ms = 0, allreduce_ms = 0;  // per rank per step
  plan::MemoryBreakdown memory;                     // per rank
  double step_ms() const { return fwd_ms + bwd_ms + allreduce_ms; }
};

// `batch_per_rank` samples on each rank of the cluster; the graph's shapes are at `evaluated_batch`.
DensePart dense_part(const ir::Graph& graph, const std::vector<EmbeddingTable>& tables, const cost::CostModel& costs,
                     const cost::Cluster& cluster, plan::Optimizer optimizer, std::int64_t batch_per_rank,
                     std::int64_t evaluated_batch);

}  // namespace rannc::sharding
