#include "cost_model/cost_model.h"

#include <stdexcept>


#include "cost_model/calibration.h"
#include "cost_model/op_signature.h"
#include "ir/requires_grad.h"

namespace rannc::cost {
namespace {

double weight_bytes(const ir::Graph& graph, const ir::Op& op) {
  double bytes = 0;
  for (auto id : op.inputs) {
    const auto& value = graph.value(id);
    if (value.is_tensor() && !value.batch_dependent) bytes += static_cast<double>(value.type.bytes());
  }
  return bytes;
}

bool any_output_batch_dependent(const ir::Graph& graph, const ir::Op& op) {
  for (auto id : op.outputs) {
    if (graph.value(id).batch_dependent) return true;
  }
  return false;
}

}  // namespace

CostModel::CostModel(const ir::Graph& graph, const DeviceSpec& device, plan::Precision precision, const ProfileDb* profile_db)
    : device_(device), precision_(precision), requires_grad_(ir::values_requiring_grad(graph)) {
  efficiencies_ = default_efficiencies(device);
  calibration_ = "defaults";
  const DeviceProfile* same_device = profile_db ? profile_db->device_for_preset(device.name) : nullptr;
  if (same_device) {
    device_ = with_measured_peaks(device, *same_device);
    efficiencies_ = calibrate(*same_device, default_efficiencies(device_));
    calibration_ = "measured";
  } else if (profile_db && !profile_db->devices().empty()) {
    // The first device of the DB by name (a DB usually holds one).
    const auto& [name, profile] = *profile_db->devices().begin();
    efficiencies_ = transfer_relative(calibrate(profile, efficiencies_), efficiencies_);
    calibration_ = "relative efficiencies from " + name;
  }
  ops_.reserve(graph.ops().size());
  for (const auto& op : graph.ops()) {
    PerOp per_op;
    per_op.work = op_work(graph, op, requires_grad_);
    per_op.weight_bytes = weight_bytes(graph, op);
    per_op.batch_dependent = any_output_batch_dependent(graph, op);
    if (same_device && per_op.work.op_class != OpClass::kGlue) {
      auto it = same_device->ops.find(op_signature(graph, op, requires_grad_));
      if (it != same_device->ops.end()) per_op.measured = &it->second;
    }
    ops_.push_back(per_op);
  }
  cost_loss(graph, same_device);
}

void CostModel::cost_loss(const ir::Graph& graph, const DeviceProfile* same_device) {
  ir::ValueId input = loss_input(graph, requires_grad_);
  if (input == ir::kNoId) return;
  const ir::Value& value = graph.value(input);
  loss_producer_ = value.producer;
  loss_.work = loss_work(value);
  loss_.batch_dependent = value.batch_dependent;
  if (!same_device) return;
  auto it = same_device->ops.find(loss_signature(value));
  if (it != same_device->ops.end()) loss_.measured = &it->second;
}

void CostModel::fuse(const ir::Graph& graph, std::vector<FusedKernel> kernels) {
  if (!fused_kernels_.empty()) throw std::logic_error("CostModel::fuse: the kernels are fused already");
  fused_kernels_ = std::move(kernels);
  const std::vector<bool> internal = kernel_internal_values(graph, fused_kernels_);
  std::vector<OpWork> works;
  works.reserve(ops_.size());
  for (const auto& op : ops_) works.push_back(op.work);
  for (const auto& kernel : fused_kernels_) {
    fuse_kernel_work(graph, internal, kernel, works);
    for (auto id : kernel) {
      PerOp& op = ops_.at(static_cast<std::size_t>(id));
      op.work = works[static_cast<std::size_t>(id)];
      op.measured = nullptr;
    }
  }
}

OpCost CostModel::loss_cost(double batch_fraction) const {
  return loss_producer_ == ir::kNoId ? OpCost{} : per_op_cost(loss_, batch_fraction);
}

PassTimes CostModel::scaled_roofline(const PerOp& op, double batch_fraction, int split) const {
  OpWork work = op.work;
  if (op.batch_dependent) {
    auto scale_bytes = [&](double bytes) { return op.weight_bytes + (bytes - op.weight_bytes) * batch_fraction; };
    work.flops_fwd *= batch_fraction;
    work.flops_bwd *= batch_fraction;
    work.bytes_fwd = work.bytes_fwd > 0 ? scale_bytes(work.bytes_fwd) : 0;
    work.bytes_bwd = work.bytes_bwd > 0 ? scale_bytes(work.bytes_bwd) : 0;
  }
  // A split op is a smaller op of the same kind: the fixed overhead stays, the rest divides.
  for (double* amount : {&work.flops_fwd, &work.flops_bwd, &work.bytes_fwd, &work.bytes_bwd}) *amount /= split;
  return roofline_times(work, device_, precision_, efficiencies_);
}

OpCost CostModel::op_cost(ir::OpId id, double batch_fraction) const { return split_op_cost(id, batch_fraction, 1); }

OpCost CostModel::split_op_cost(ir::OpId id, double batch_fraction, int split) const {
  OpCost cost = per_op_cost(ops_.at(static_cast<std::size_t>(id)), batch_fraction, split);
  // rannc-run's loss reads the whole output of the op it follows, which is never split.
  if (id == loss_producer_) {
    OpCost loss = loss_cost(batch_fraction);
    cost.fwd_ms += loss.fwd_ms;
    cost.bwd_ms += loss.bwd_ms;
    cost.fwd_host_ms += loss.fwd_host_ms;
    cost.bwd_host_ms += loss.bwd_host_ms;
  }
  return cost;
}

OpCost CostModel::per_op_cost(const PerOp& op, double batch_fraction, int split) const {
  PassTimes roofline = scaled_roofline(op, batch_fraction, split);
  if (!op.measured) return {roofline.fwd * 1e3, roofline.bwd * 1e3, 0, 0, CostSource::kRoofline};
  const OpMeasurement& m = *op.measured;
  // The host's time to issue an op does not depend on its sizes.
  if (batch_fraction == 1.0 && split == 1) return {m.fwd_ms, m.bwd_ms, m.fwd_host_ms, m.bwd_host_ms, CostSource::kMeasured};
  // Another batch size: the device's time as measured, scaled as the roofline scales.
  PassTimes at_batch = scaled_roofline(op, 1.0);
  auto scale = [](double measured, double now, double then) { return then > 0 ? measured * now / then : measured; };
  return {scale(m.fwd_ms, roofline.fwd, at_batch.fwd), scale(m.bwd_ms, roofline.bwd, at_batch.bwd), m.fwd_host_ms,
          m.bwd_host_ms, CostSource::kMeasured};
}

}  // namespace rannc::cost
