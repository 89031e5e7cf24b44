#include "cost_model/calibration.h"

#include <algorithm>
#include <vector>

namespace rannc::cost {
namespace {

constexpr double kMinEfficiency = 0.01;
constexpr int kMinSamples = 2;
// An op whose ideal time is below this share of its measured time measures the overhead alone.
constexpr double kOverheadOnlyShare = 0.05;

struct ClassFit {
  double ideal = 0, measured = 0;
  int samples = 0;

  void add(double ideal_s, double measured_s) {
    ideal += ideal_s;
    measured += measured_s;
    ++samples;
  }
  bool usable() const { return samples >= kMinSamples && measured > 0 && ideal > 0; }
  double efficiency() const { return std::clamp(ideal / measured, kMinEfficiency, 1.0); }
};

OpClass class_named(const std::string& name) {
  for (std::size_t i = 0; i < kOpClassCount; ++i) {
    auto op_class = static_cast<OpClass>(i);
    if (op_class_name(op_class) == name) return op_class;
  }
  return OpClass::kUnknown;
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

double fit_overhead(const DeviceProfile& profile, double fallback) {
  std::vector<double> tiny;
  for (const auto& [signature, m] : profile.ops) {
    double ideal = std::max(m.flops_fwd / profile.peak_fp32_flops, m.bytes_fwd / profile.mem_bandwidth);
    double measured = m.fwd_ms * 1e-3;
    if (measured > 0 && ideal < kOverheadOnlyShare * measured) tiny.push_back(measured);
  }
  return tiny.empty() ? fallback : median(tiny);
}

}  // namespace

DeviceSpec with_measured_peaks(const DeviceSpec& preset, const DeviceProfile& profile) {
  DeviceSpec device = preset;
  device.peak_fp32_flops = profile.peak_fp32_flops;
  device.peak_half_flops = std::max(device.peak_half_flops * profile.peak_fp32_flops / preset.peak_fp32_flops,
                                    profile.peak_fp32_flops);
  device.mem_bandwidth = profile.mem_bandwidth;
  device.op_overhead = profile.op_overhead;
  return device;
}

Efficiencies calibrate(const DeviceProfile& profile, const Efficiencies& defaults) {
  Efficiencies eff = defaults;
  eff.op_overhead = fit_overhead(profile, profile.op_overhead);
  std::vector<ClassFit> compute(kOpClassCount), memory(kOpClassCount);
  auto add_pass = [&](OpClass op_class, double flops, double bytes, double ms) {
    if (ms <= 0 || (flops <= 0 && bytes <= 0)) return;
    double compute_s = flops / profile.peak_fp32_flops, memory_s = bytes / profile.mem_bandwidth;
    double net = std::max(ms * 1e-3 - eff.op_overhead, 0.1 * ms * 1e-3);
    auto index = static_cast<std::size_t>(op_class);
    if (compute_s >= memory_s) compute[index].add(compute_s, net);
    else memory[index].add(memory_s, net);
  };
  for (const auto& [signature, m] : profile.ops) {
    OpClass op_class = class_named(m.op_class);
    add_pass(op_class, m.flops_fwd, m.bytes_fwd, m.fwd_ms);
    add_pass(op_class, m.flops_bwd, m.bytes_bwd, m.bwd_ms);
  }
  for (std::size_t i = 0; i < kOpClassCount; ++i) {
    if (compute[i].usable()) eff.compute[i] = compute[i].efficiency();
    if (memory[i].usable()) eff.memory[i] = memory[i].efficiency();
  }
  return eff;
}

Efficiencies transfer_relative(const Efficiencies& fitted, const Efficiencies& target_defaults) {
  Efficiencies eff = target_defaults;
  double compute_scale = target_defaults.compute_of(OpClass::kMatMul) / fitted.compute_of(OpClass::kMatMul);
  double memory_scale = target_defaults.memory_of(OpClass::kElementwise) / fitted.memory_of(OpClass::kElementwise);
  for (std::size_t i = 0; i < kOpClassCount; ++i) {
    eff.compute[i] = std::clamp(fitted.compute[i] * compute_scale, kMinEfficiency, 1.0);
    eff.memory[i] = std::clamp(fitted.memory[i] * memory_scale, kMinEfficiency, 1.0);
  }
  return eff;
}

}  // namespace rannc::cost
