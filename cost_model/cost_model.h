// Per-op forward and backward times of a model on a target device: the entry point of the
// cost model for the partitioner and for `inspect`.
//
// Where a profile DB has measurements of the target device, an op whose signature it holds
// takes the measured times (scaled by the roofline for other batch sizes) and the others take
// a roofline calibrated on those measurements. A DB of another device only calibrates the
// efficiency factors relative to each other. Without a DB the roofline uses default
// efficiencies. The model keeps pointers into the DB: the DB must outlive it.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "cost_model/profile_db.h"
#include "cost_model/roofline.h"
#include "ir/graph.h"

namespace rannc::cost {

enum class CostSource : std::uint8_t { kMeasured, kRoofline };

struct OpCost {
  double fwd_ms = 0;  // the device's time of the forward pass
  double bwd_ms = 0;  // and of the backward pass
  // The host's time to issue each pass, where a profile measured it apart from the device's (on
  // a GPU); 0 where the device's time covers it (the CPU, the roofline's op overhead).
  double fwd_host_ms = 0, bwd_host_ms = 0;
  CostSource source = CostSource::kRoofline;
};

// The time of one pass over a sequence of ops. The host issues them while the device runs them,
// each waiting for the other only where it is ahead: the host runs ahead during large kernels
// and the GPU waits for it behind small ones, so the pass takes the longer of the two sums.
// (Measured on an H200: within 8% of whole steps that were 8% to 95% GPU-busy, where summing
// each op's longer time over-predicted by up to 1.3x: docs/gpu.md.)
struct PassTime {
  double device_ms = 0, host_ms = 0;
  void add(double device, double host) {
    device_ms += device;
    host_ms += host;
  }
  double ms() const { return std::max(device_ms, host_ms); }
};

// A forward and a backward pass over a sequence of ops.
struct StepTime {
  PassTime fwd, bwd;
  void add(const OpCost& cost) {
    fwd.add(cost.fwd_ms, cost.fwd_host_ms);
    bwd.add(cost.bwd_ms, cost.bwd_host_ms);
  }
  double ms() const { return fwd.ms() + bwd.ms(); }
};

class CostModel {
 public:
  CostModel(const ir::Graph& graph, const DeviceSpec& device, plan::Precision precision, const ProfileDb* profile_db);

  // Times of an op when the batch is `batch_fraction` of the one the graph's shapes were
  // evaluated at (microbatches are fractions of the batch): batch-dependent work scales, weight
  // reads do not. The op that computes the output rannc-run takes its loss of carries the
  // loss's times too (loss_cost).
  OpCost op_cost(ir::OpId op, double batch_fraction = 1.0) const;
  // The same op split `split` ways by tensor parallelism (partitioner/tensor_regions.h): each
  // device does 1/split of the work and reads 1/split of the weights, at the batch fraction.
  OpCost split_op_cost(ir::OpId op, double batch_fraction, int split) const;
  // rannc-run's training loss (op_work.h's loss_input) is no op of the graph: op_cost adds its
  // times to the op that computes the output it is taken of (ir::kNoId: no such loss). Measured
  // when the profile DB holds its signature, like an op.
  ir::OpId loss_producer() const { return loss_producer_; }
  OpCost loss_cost(double batch_fraction = 1.0) const;

  // The training stack runs each of `kernels` as one kernel (op_work.h's FusedKernel): their ops
  // take fuse_kernel_work's work on the roofline (a profile measured them run alone, so their
  // measurements no longer apply). Once: the planner's copy of the model.
  void fuse(const ir::Graph& graph, std::vector<FusedKernel> kernels);
  // The kernels fused (activation_memory keeps what they keep).
  const std::vector<FusedKernel>& fused_kernels() const { return fused_kernels_; }

  const OpWork& work(ir::OpId op) const { return ops_[static_cast<std::size_t>(op)].work; }
  const std::vector<bool>& requires_grad() const { return requires_grad_; }
  const DeviceSpec& device() const { return device_; }
  const Efficiencies& efficiencies() const { return efficiencies_; }
  plan::Precision precision() const { return precision_; }
  // How the times were obtained, for reports: "measured", "relative efficiencies from <device>" or "defaults".
  const std::string& calibration() const { return calibration_; }

 private:
  struct PerOp {
    OpWork work;
    double weight_bytes = 0;  // bytes read that do not scale with the batch
    bool batch_dependent = false;
    const OpMeasurement* measured = nullptr;
  };

  PassTimes scaled_roofline(const PerOp& op, double batch_fraction, int split = 1) const;
  OpCost per_op_cost(const PerOp& op, double batch_fraction, int split = 1) const;
  void cost_loss(const ir::Graph& graph, const DeviceProfile* same_device);

  DeviceSpec device_;
  plan::Precision precision_;
  Efficiencies efficiencies_;
  std::string calibration_;
  std::vector<bool> requires_grad_;
  std::vector<PerOp> ops_;
  ir::OpId loss_producer_ = ir::kNoId;
  PerOp loss_;
  std::vector<FusedKernel> fused_kernels_;
};

}  // namespace rannc::cost
