#include "cost_model/step_estimate.h"

namespace rannc::cost {

StepEstimate estimate_step(const ir::Graph& graph, const DeviceSpec& device, plan::Precision precision, plan::Optimizer optimizer,
                           const ProfileDb* profile_db, std::vector<FusedKernel> fused) {
  CostModel costs(graph, device, precision, profile_db);
  if (!fused.empty()) costs.fuse(graph, std::move(fused));
  StepEstimate estimate;
  StepTime step;
  for (const auto& op : graph.ops()) {
    OpCost cost = costs.op_cost(op.id);
    step.add(cost);
    estimate.ms_by_class[static_cast<std::size_t>(costs.work(op.id).op_class)] += cost.fwd_ms + cost.bwd_ms;
    if (cost.source == CostSource::kMeasured) ++estimate.measured_ops;
  }
  estimate.passes = step;
  estimate.fwd_ms = step.fwd.ms();
  estimate.bwd_ms = step.bwd.ms();
  auto activations = activation_memory(graph, costs.requires_grad(), precision, costs.fused_kernels());
  estimate.memory = stage_memory(whole_model_footprint(graph, activations, precision), StagePlacement{}, optimizer, precision);
  estimate.calibration = costs.calibration();
  return estimate;
}

}  // namespace rannc::cost
