#include "sharding/dense_part.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "cost_model/comm.h"
#include "cost_model/memory.h"

namespace rannc::sharding {
namespace {

// What the model outputs are computed from, up to the tables' pooled lookups: the lookups and
// the ops that only compute their indices stay out.
std::vector<ir::OpId> dense_ops(const ir::Graph& graph, const std::vector<EmbeddingTable>& tables) {
  std::set<ir::ValueId> pooled;
  for (const auto& table : tables) pooled.insert(table.pooled.begin(), table.pooled.end());
  return graph.ops_computing(graph.model_outputs(), pooled);
}

// The bytes of a dense input at the evaluated batch. A pooled lookup's shape can be unknown in
// the IR (ONNX exports EmbeddingBag as a Loop): it is one row of its table's dim per sample.
double input_bytes(const ir::Graph& graph, ir::ValueId id, const std::vector<EmbeddingTable>& tables,
                   std::int64_t evaluated_batch, plan::Precision precision) {
  double bytes = cost::stored_bytes(graph.value(id), precision);
  if (bytes > 0) return bytes;
  for (const auto& table : tables) {
    if (std::find(table.pooled.begin(), table.pooled.end(), id) != table.pooled.end())
      return static_cast<double>(evaluated_batch * table.dim) * 4 * cost::activation_byte_scale(precision);
  }
  return bytes;
}

// The memory model's view of the dense ops at `fraction` of the evaluated batch: their weights
// (tables excluded), what they keep for backward, what they receive (model inputs and pooled
// embeddings) and send, and their largest transient.
cost::StageFootprint dense_footprint(const ir::Graph& graph, const std::vector<ir::OpId>& ops,
                                     const std::vector<EmbeddingTable>& tables, const cost::CostModel& costs,
                                     std::int64_t evaluated_batch, double fraction) {
  cost::StageFootprint footprint;
  auto activations = cost::activation_memory(graph, costs.requires_grad(), costs.precision());
  std::set<ir::ValueId> weights, inputs;
  std::set<ir::OpId> dense(ops.begin(), ops.end());
  for (auto id : ops) {
    auto i = static_cast<std::size_t>(id);
    footprint.kept_bytes += activations.kept_bytes[i] * fraction + activations.fixed_kept_bytes[i];
    double weight_grads = activations.weight_grad_bytes[i];
    footprint.workspace_bytes =
        std::max(footprint.workspace_bytes, (activations.workspace_bytes[i] - weight_grads) * fraction + weight_grads);
    for (auto v : graph.op(id).inputs) {
      const auto& value = graph.value(v);
      if (value.is_weight()) weights.insert(v);
      else if (value.is_tensor() && (value.producer == ir::kNoId || !dense.count(value.producer))) inputs.insert(v);
    }
  }
  for (auto v : weights) {
    const auto& value = graph.value(v);
    auto elements = static_cast<double>(value.type.numel());
    if (value.role == ir::ValueRole::kBuffer) {
      footprint.buffer_bytes += static_cast<double>(value.type.bytes());
    } else {
      footprint.param_elements += elements;
      footprint.largest_param_elements = std::max(footprint.largest_param_elements, elements);
    }
  }
  for (auto v : inputs) footprint.input_bytes += input_bytes(graph, v, tables, evaluated_batch, costs.precision()) * fraction;
  for (auto v : graph.model_outputs()) footprint.final_output_bytes += cost::stored_bytes(graph.value(v), costs.precision()) * fraction;
  footprint.tied_grad_bytes = cost::largest_tied_grad_bytes(graph, ops);
  return footprint;
}

}  // namespace

DensePart dense_part(const ir::Graph& graph, const std::vector<EmbeddingTable>& tables, const cost::CostModel& costs,
                     const cost::Cluster& cluster, plan::Optimizer optimizer, std::int64_t batch_per_rank,
                     std::int64_t evaluated_batch) {
  DensePart dense;
  dense.ops = dense_ops(graph, tables);
  const double fraction = static_cast<double>(batch_per_rank) / static_cast<double>(std::max<std::int64_t>(1, evaluated_batch));
  cost::StepTime step;
  for (auto id : dense.ops) step.add(costs.op_cost(id, fraction));
  dense.fwd_ms = step.fwd.ms();
  dense.bwd_ms = step.bwd.ms();
  auto footprint = dense_footprint(graph, dense.ops, tables, costs, evaluated_batch, fraction);
  dense.param_elements = footprint.param_elements;
  std::vector<int> ranks(static_cast<std::size_t>(cluster.gpus()));
  std::iota(ranks.begin(), ranks.end(), 0);
  cost::StateLayout state{cluster.gpus(), plan::StateSharding::kNone, false};
  if (cluster.gpus() > 1)
    dense.allreduce_ms = cost::gradient_sync_seconds(cluster, ranks, footprint.param_elements, state.sharding, costs.precision()) * 1e3;
  dense.memory = cost::stage_memory(footprint, 1, plan::Recompute::kNone, state, optimizer, costs.precision());
  // The one dense stage sends and receives nothing between stages (its inputs, which its
  // activations count, come from the data and the embedding exchange): no transfer buffers.
  dense.memory.comm_buffers -= 2 * footprint.input_bytes;
  // The embedding exchange holds the pooled rows and their gradients until the tables step, after
  // the dense part's step: its flat gradient copy adds to the passes' memory instead of following it.
  dense.memory.comm_buffers += dense.memory.step_buffers;
  dense.memory.step_buffers = 0;
  return dense;
}

}  // namespace rannc::sharding
