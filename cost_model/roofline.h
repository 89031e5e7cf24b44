// Time of an op on a device by the roofline: the slower of its arithmetic at the device's
// peak and its memory traffic at the device's bandwidth, each scaled by an efficiency factor
// of the op's class, plus a fixed launch overhead.
#pragma once

#include <array>
#include <string_view>

#include "cost_model/device.h"
#include "cost_model/op_work.h"
#include "plan/options.h"

namespace rannc::cost {

// Throws InputError when the device cannot compute in that precision (bf16 on a V100).
void check_precision_supported(const DeviceSpec& device, plan::Precision precision);

inline constexpr std::size_t kOpClassCount = static_cast<std::size_t>(OpClass::kUnknown) + 1;

// Fractions of the peak reached per op class; defaults are typical of large GPU kernels
// (cuBLAS GEMMs near 70% of peak, elementwise kernels near 70% of bandwidth); a profile DB
// replaces them with fitted ones (cost_model/calibration.h).
struct Efficiencies {
  std::array<double, kOpClassCount> compute{};
  std::array<double, kOpClassCount> memory{};
  double op_overhead = 0;  // seconds per op that does work

  double compute_of(OpClass c) const { return compute[static_cast<std::size_t>(c)]; }
  double memory_of(OpClass c) const { return memory[static_cast<std::size_t>(c)]; }
};

Efficiencies default_efficiencies(const DeviceSpec& device);

// Peak FLOP/s an op class runs at in this precision: tensor cores for matmul and conv under
// mixed precision, fp32 otherwise.
double peak_flops(const DeviceSpec& device, plan::Precision precision, OpClass op_class);

// Activations are stored and moved in 16 bits under mixed precision.
double activation_byte_scale(plan::Precision precision);

struct PassTimes {
  double fwd = 0;  // seconds
  double bwd = 0;
};

// Efficiency 1 gives the ideal time of the work; the overhead is added only to passes that do work.
PassTimes roofline_times(const OpWork& work, const DeviceSpec& device, plan::Precision precision, const Efficiencies& eff);

// One pass: flops and bytes on the roofline.
double roofline_seconds(double flops, double bytes, OpClass op_class, const DeviceSpec& device, plan::Precision precision,
                        const Efficiencies& eff);

}  // namespace rannc::cost
