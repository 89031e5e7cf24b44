#include "cost_model/roofline.h"

#include <algorithm>
#include <string>

#include "support/error.h"
#include "support/named_choice.h"

namespace rannc::cost {

void check_precision_supported(const DeviceSpec& device, plan::Precision precision) {
  if (precision == plan::Precision::kBf16Mixed && !device.has_bf16) {
    throw InputError("--precision bf16-mixed: device " + device.name + " has no bf16 support (use fp16-mixed)");
  }
}

Efficiencies default_efficiencies(const DeviceSpec& device) {
  Efficiencies eff;
  eff.compute.fill(0.5);
  eff.memory.fill(0.7);
  eff.compute[static_cast<std::size_t>(OpClass::kMatMul)] = 0.7;
  eff.compute[static_cast<std::size_t>(OpClass::kConv)] = 0.6;
  eff.memory[static_cast<std::size_t>(OpClass::kEmbedding)] = 0.5;  // gathers and scatters of rows
  eff.memory[static_cast<std::size_t>(OpClass::kUnknown)] = 0.5;
  eff.op_overhead = device.op_overhead;
  return eff;
}

double peak_flops(const DeviceSpec& device, plan::Precision precision, OpClass op_class) {
  bool tensor_cores = op_class == OpClass::kMatMul || op_class == OpClass::kConv;
  return precision != plan::Precision::kFp32 && tensor_cores ? device.peak_half_flops : device.peak_fp32_flops;
}

double activation_byte_scale(plan::Precision precision) { return precision == plan::Precision::kFp32 ? 1.0 : 0.5; }

double roofline_seconds(double flops, double bytes, OpClass op_class, const DeviceSpec& device, plan::Precision precision,
                        const Efficiencies& eff) {
  if (flops <= 0 && bytes <= 0) return 0;
  double compute = flops / (peak_flops(device, precision, op_class) * eff.compute_of(op_class));
  double memory = bytes * activation_byte_scale(precision) / (device.mem_bandwidth * eff.memory_of(op_class));
  return std::max(compute, memory) + eff.op_overhead;
}

PassTimes roofline_times(const OpWork& work, const DeviceSpec& device, plan::Precision precision, const Efficiencies& eff) {
  return {roofline_seconds(work.flops_fwd, work.bytes_fwd, work.op_class, device, precision, eff),
          roofline_seconds(work.flops_bwd, work.bytes_bwd, work.op_class, device, precision, eff)};
}

}  // namespace rannc::cost
