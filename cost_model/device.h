// Device presets: the published peak speeds and memory of the accelerators a plan can target.
//
// Peaks are dense (no structured sparsity) datasheet figures; the roofline scales them by an
// efficiency factor per op class (cost_model/roofline.h), and a profile DB can calibrate those
// factors. The `cpu` preset describes the machine the tool runs on: its compute figures are
// measured there (compiler/cpu_calibration.h); the fixed ones in device.cpp stand in only when
// told to (RANNC_CPU_CALIBRATION=fixed) or when the machine cannot be measured.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rannc::cost {

// A link between two devices: bandwidth per direction and per device, and the latency of one message.
struct Link {
  double bandwidth = 0;  // bytes per second
  double latency = 0;    // seconds
};

// The host side of a node, where offloaded training state lives: its memory (for the whole
// node), the link between it and each device (PCIe), and the memory bandwidth the optimizer
// step on the host runs at (shared by the node's devices). No memory: nothing can be offloaded.
struct HostSpec {
  std::int64_t mem_bytes = 0;  // per node
  Link link;                   // per device, each direction
  double mem_bandwidth = 0;    // bytes per second, per node
};

struct DeviceSpec {
  std::string name;                 // the preset name, e.g. "h100-80g"
  std::string description;          // e.g. "NVIDIA H100 SXM5 80GB"
  double peak_fp32_flops = 0;       // FLOP/s in fp32 (no TF32)
  double peak_half_flops = 0;       // FLOP/s in fp16/bf16 on tensor cores
  bool has_bf16 = true;             // V100 has fp16 tensor cores but no bf16
  double mem_bandwidth = 0;         // bytes per second of device memory
  std::int64_t mem_bytes = 0;       // device memory
  double op_overhead = 0;           // seconds per op launched (kernel launch or dispatch)
  Link intra_node;                  // the usual link between devices of one node (NVLink)
  Link inter_node;                  // the usual network link per device between nodes
  HostSpec host;                    // the usual host of a node of these devices
  bool measured_here = false;       // the `cpu` preset: with_machine_figures() gives its compute figures
};

// The compute figures of the CPU the tool runs on, as libtorch trains there (its default threads),
// measured by compiler/cpu_calibration.h.
struct MachineFigures {
  double peak_fp32_flops = 0;  // FLOP/s of a large fp32 matmul
  double peak_bf16_flops = 0;  // FLOP/s of a large bf16 matmul
  double mem_bandwidth = 0;    // bytes read plus bytes written per second by a large copy
  double op_overhead = 0;      // seconds per pass of a near-empty op: interpreter, dispatch, autograd
};

// The `cpu` preset with a machine's figures in place of its fixed compute figures; the 16-bit
// peak is bf16's (fp16 has no faster kernels on CPUs). Memory, links and host stay the preset's.
DeviceSpec with_machine_figures(const DeviceSpec& preset, const MachineFigures& figures, const std::string& description);

// The preset of that name, or nullptr.
const DeviceSpec* find_device_preset(std::string_view name);

// The preset a profiled device's measurements calibrate: a preset's own name, "cpu", or a GPU as
// libtorch names it ("NVIDIA H100 80GB HBM3" -> "h100-80g"); an unknown GPU gets the default
// preset (its measured peaks replace the preset's, cost_model/calibration.h).
std::string preset_for_device(std::string_view device_name);

// All preset names, sorted, for error messages and --help.
std::vector<std::string> device_preset_names();

}  // namespace rannc::cost
