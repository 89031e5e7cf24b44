#include "cost_model/device.h"

#include <algorithm>

namespace rannc::cost {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;
constexpr std::int64_t kGiB = std::int64_t{1} << 30;
constexpr std::int64_t kH200MemBytes = 141'000'000'000;  // the datasheet's "141GB" is decimal

// Latencies are typical NCCL small-message latencies (nccl-tests at a few bytes), not wire latencies:
// they include the protocol and launch costs a collective pays per step.
constexpr double kNvlinkLatency = 3 * kMicro;
constexpr double kInfinibandLatency = 5 * kMicro;
constexpr double kGpuOpOverhead = 5 * kMicro;  // CUDA kernel launch plus framework dispatch

// Link bandwidths are per direction and per GPU: NVLink is the aggregate of a GPU's links, the
// network is one NIC per GPU as in DGX systems.
constexpr Link kNvlink2{150 * kGiga, kNvlinkLatency};   // 6 NVLink2 links x 25 GB/s
constexpr Link kNvlink3{300 * kGiga, kNvlinkLatency};   // 12 NVLink3 links x 25 GB/s
constexpr Link kNvlink4{450 * kGiga, kNvlinkLatency};   // 18 NVLink4 links x 25 GB/s
constexpr Link kIbEdr{100 * kGiga / 8, kInfinibandLatency};  // 100 Gb/s
constexpr Link kIbHdr{200 * kGiga / 8, kInfinibandLatency};  // 200 Gb/s
constexpr Link kIbNdr{400 * kGiga / 8, kInfinibandLatency};  // 400 Gb/s

// Hosts of the usual 8-GPU nodes: memory, PCIe per GPU (effective), and the CPU sockets' memory
// bandwidth (channels x transfer rate x 8 bytes):
//   DGX-1 (V100): 512 GiB, PCIe 3.0 x16 ~12 GB/s, 2 x Xeon E5-2698 v4, 4 ch DDR4-2400: 154 GB/s.
//   DGX A100: 1 TiB, PCIe 4.0 x16 ~25 GB/s, 2 x EPYC 7742, 8 ch DDR4-3200: 410 GB/s.
//   DGX H100/H200: 2 TiB, PCIe 5.0 x16 ~50 GB/s, 2 x Xeon 8480C, 8 ch DDR5-4800: 614 GB/s.
constexpr double kPcieLatency = 10 * kMicro;
constexpr HostSpec kDgx1Host{512 * kGiB, Link{12 * kGiga, kPcieLatency}, 154 * kGiga};
constexpr HostSpec kDgxA100Host{1024 * kGiB, Link{25 * kGiga, kPcieLatency}, 410 * kGiga};
constexpr HostSpec kDgxH100Host{2048 * kGiB, Link{50 * kGiga, kPcieLatency}, 614 * kGiga};

struct Figures {
  const char* name;
  const char* description;
  double fp32_tflops;
  double half_tflops;
  bool bf16;
  double mem_bandwidth_gbps;  // GB/s, 10^9 bytes
  std::int64_t mem_bytes;
  Link intra_node;
  Link inter_node;
  HostSpec host;
};

DeviceSpec make_spec(const Figures& f) {
  return DeviceSpec{f.name,
                    f.description,
                    f.fp32_tflops * kTera,
                    f.half_tflops * kTera,
                    f.bf16,
                    f.mem_bandwidth_gbps * kGiga,
                    f.mem_bytes,
                    kGpuOpOverhead,
                    f.intra_node,
                    f.inter_node,
                    f.host};
}

// Dense peaks (no sparsity) from the vendor datasheets:
//   V100: "NVIDIA Tesla V100 GPU Accelerator" datasheet (SXM2 column).
//   A100: "NVIDIA A100 Tensor Core GPU" datasheet (SXM columns; the 312 TFLOP/s is BF16/FP16 dense).
//   H100: "NVIDIA H100 Tensor Core GPU" datasheet (SXM column; 989 TFLOP/s is the dense half of the
//         1979 TFLOP/s quoted with sparsity).
//   H200: "NVIDIA H200 Tensor Core GPU" datasheet (SXM column); compute as H100, memory 141 GB
//         (the datasheet's decimal GB) at 4.8 TB/s.
// The `cpu` preset's compute figures are measured on the machine the tool runs on
// (with_machine_figures); the fixed ones here, from the 2-core development machine (AMD EPYC,
// libtorch 1.13), stand in only where no measurement is wanted or possible:
//   matmul: torch.set_num_threads(2); a = torch.randn(2048, 2048); time a @ a, median of 7 runs t:
//           2 * 2048^3 / t = 155 GFLOP/s; the half peak taken as equal.
//   memory: b = torch.empty(512 << 20, dtype=torch.uint8); time b.clone() (reads and writes every
//           byte), t: 2 * bytes / t = 32 GB/s.
//   links:  shared memory between processes of one machine ~10 GB/s, 2 us; 10 Gb/s Ethernet
//           between machines = 1.25 GB/s, 50 us (TCP round trips).
//   host:   the machine itself: "offloaded" state is a second copy in the same memory, copied at
//           the memory bandwidth (read and write: 16 GB/s); its 24 GiB of RAM, the same memory
//           the device's figure counts.
std::vector<DeviceSpec> make_presets() {
  std::vector<DeviceSpec> presets{
      make_spec({"v100-32g", "NVIDIA V100 SXM2 32GB", 15.7, 125, false, 900, 32 * kGiB, kNvlink2, kIbEdr, kDgx1Host}),
      make_spec({"a100-40g", "NVIDIA A100 SXM 40GB", 19.5, 312, true, 1555, 40 * kGiB, kNvlink3, kIbHdr, kDgxA100Host}),
      make_spec({"a100-80g", "NVIDIA A100 SXM 80GB", 19.5, 312, true, 2039, 80 * kGiB, kNvlink3, kIbHdr, kDgxA100Host}),
      make_spec({"h100-80g", "NVIDIA H100 SXM5 80GB", 67, 989, true, 3350, 80 * kGiB, kNvlink4, kIbNdr, kDgxH100Host}),
      make_spec({"h200", "NVIDIA H200 SXM 141GB", 67, 989, true, 4800, kH200MemBytes, kNvlink4, kIbNdr, kDgxH100Host}),
  };
  DeviceSpec cpu = make_spec({"cpu", "CPU (2-core AMD EPYC development machine, libtorch 1.13)", 0.155, 0.155, true, 32,
                        24 * kGiB, Link{10 * kGiga, 2 * kMicro}, Link{10 * kGiga / 8, 50 * kMicro},
                        HostSpec{24 * kGiB, Link{16 * kGiga, 0}, 32 * kGiga}});
  cpu.op_overhead = 10 * kMicro;  // torch dispatch per op, no launch
  cpu.measured_here = true;
  presets.push_back(cpu);
  return presets;
}

const std::vector<DeviceSpec>& presets() {
  static const std::vector<DeviceSpec> all = make_presets();
  return all;
}

}  // namespace

const DeviceSpec* find_device_preset(std::string_view name) {
  for (const auto& spec : presets()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string preset_for_device(std::string_view device_name) {
  if (find_device_preset(device_name)) return std::string(device_name);
  auto has = [&](std::string_view part) { return device_name.find(part) != std::string_view::npos; };
  if (has("H200")) return "h200";
  if (has("H100")) return "h100-80g";
  if (has("A100")) return has("40GB") ? "a100-40g" : "a100-80g";
  if (has("V100")) return "v100-32g";
  return "a100-80g";  // cluster.h's kDefaultDevice
}

DeviceSpec with_machine_figures(const DeviceSpec& preset, const MachineFigures& figures, const std::string& description) {
  DeviceSpec device = preset;
  device.description = description;
  device.peak_fp32_flops = figures.peak_fp32_flops;
  device.peak_half_flops = figures.peak_bf16_flops;
  device.mem_bandwidth = figures.mem_bandwidth;
  device.op_overhead = figures.op_overhead;
  return device;
}

std::vector<std::string> device_preset_names() {
  std::vector<std::string> names;
  for (const auto& spec : presets()) names.push_back(spec.name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace rannc::cost
