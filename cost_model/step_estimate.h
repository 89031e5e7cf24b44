// A whole model as one stage on one device: predicted time and memory of a training step.
// What `inspect` and `profile` report, and what the profile benchmark compares with libtorch.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "cost_model/cost_model.h"
#include "cost_model/memory.h"

namespace rannc::cost {

struct StepEstimate {
  double fwd_ms = 0, bwd_ms = 0;
  StepTime passes;  // each pass's device and host sums, whose longer fwd_ms and bwd_ms are
  std::array<double, kOpClassCount> ms_by_class{};  // the device's forward + backward per op class
  int measured_ops = 0;                             // ops whose times came from the profile DB
  plan::MemoryBreakdown memory;                           // at one microbatch of the whole batch
  std::string calibration;
};

// `fused`: the kernels the training stack runs fused (CostModel::fuse), none by default.
StepEstimate estimate_step(const ir::Graph& graph, const DeviceSpec& device, plan::Precision precision, plan::Optimizer optimizer,
                           const ProfileDb* profile_db, std::vector<FusedKernel> fused = {});

}  // namespace rannc::cost
