// The profile DB: measured forward and backward times and memory of op signatures, per
// device. `rannc-partition profile` fills it; planning reads it (cost_model/cost_model.h).
//
// On disk it is JSON, deterministic (sorted keys, fixed number format):
//   {"format": "rannc-profile-db", "version": 1,
//    "devices": {"cpu": {"description": "...", "peak_fp32_flops": ..., "mem_bandwidth": ...,
//                        "op_overhead": ..., "ops": {SIGNATURE: {"kind", "class", "flops_fwd",
//                        "bytes_fwd", "flops_bwd", "bytes_bwd", "fwd_ms", "bwd_ms",
//                        "fwd_peak_bytes", "retained_bytes", "bwd_peak_bytes", "reps",
//                        and on a GPU "fwd_host_ms", "bwd_host_ms"}}}},
//    "models": {KEY: {"path", "device", "signatures": {SIGNATURE: count}, "unprofiled_kinds",
//                     "unprofiled_signatures", "ops", "fwd_ms", "bwd_ms", "peak_bytes"}}}
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rannc::cost {

struct OpMeasurement {
  std::string kind;
  std::string op_class;  // op_class_name() of the analytic model, for calibration
  double flops_fwd = 0, bytes_fwd = 0, flops_bwd = 0, bytes_bwd = 0;  // the analytic work, for calibration
  // Median time of a pass on the device: on a GPU its kernels' (CUDA events, the kernels run back
  // to back), on the CPU the whole pass's.
  double fwd_ms = 0;                 // forward
  double bwd_ms = 0;                 // backward; 0 when no input needs a gradient
  // On a GPU, the host's median time to issue a pass within a step (0 on the CPU, whose fwd_ms
  // and bwd_ms cover it). The cost model takes a pass over many ops as the longer of the sums.
  double fwd_host_ms = 0, bwd_host_ms = 0;
  std::int64_t fwd_peak_bytes = 0;   // allocated during forward, above what existed before
  std::int64_t retained_bytes = 0;   // still allocated after forward: outputs plus what autograd saved
  std::int64_t bwd_peak_bytes = 0;   // allocated during backward, above what existed before it
  int reps = 0;                      // timed repetitions behind the medians
};

struct DeviceProfile {
  std::string description;     // what was measured: processor, threads, libtorch version
  double peak_fp32_flops = 0;  // measured large-matmul FLOP/s
  double mem_bandwidth = 0;    // measured copy bandwidth, bytes/s
  double op_overhead = 0;      // measured seconds per pass of a small op (MachineFigures::op_overhead)
  std::map<std::string, OpMeasurement> ops;  // by op signature (cost_model/op_signature.h)
};

// What a profile run learnt of one model, so that a later run over the same file and inputs
// can report without loading the model again.
struct ModelProfile {
  std::string path;                        // where the model was when profiled (informative)
  std::string device;                      // the DeviceProfile it was measured on
  std::map<std::string, int> signatures;   // measured op signature -> ops with it in the model
  std::vector<std::string> unprofiled_kinds;  // kinds of the signatures that could not run alone
  int unprofiled_signatures = 0;
  int ops = 0;                             // ops with a cost (not glue)
  double fwd_ms = 0, bwd_ms = 0;           // predicted forward and backward of one training step
  double peak_bytes = 0;                   // predicted peak memory of that step on one device
};

class ProfileDb {
 public:
  // An empty DB when the file does not exist (unless `must_exist`: commands that only read a
  // DB); InputError naming the file when it is not a readable profile DB of this version.
  static ProfileDb load(const std::string& path, bool must_exist = false);
  // Writes to a temporary file beside `path` and renames it over, so a crash leaves the old DB.
  void save(const std::string& path) const;

  const DeviceProfile* device(const std::string& name) const;
  // The measurements that calibrate `preset`: the device of that name, else the first one (by
  // name) that preset_for_device maps to it (a GPU profiled under its libtorch name).
  const DeviceProfile* device_for_preset(const std::string& preset) const;
  DeviceProfile& device_for_update(const std::string& name) { return devices_[name]; }
  const std::map<std::string, DeviceProfile>& devices() const { return devices_; }

  // By model key: the file's SHA-256 and the inputs it was profiled with.
  const ModelProfile* model(const std::string& key) const;
  void set_model(const std::string& key, ModelProfile profile) { models_[key] = std::move(profile); }

 private:
  std::map<std::string, DeviceProfile> devices_;
  std::map<std::string, ModelProfile> models_;
};

}  // namespace rannc::cost
