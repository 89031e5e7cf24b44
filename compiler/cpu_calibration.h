// The `cpu` device preset on the machine the tool runs on. Its fixed figures (cost_model/
// device.cpp) describe one development machine; plans and predictions for this one come from this
// one's own: on first use the torch plugin measures the CPU as a training step uses it (matmul
// peak in fp32 and bf16, copy bandwidth, per-op overhead; about a second) and the figures are
// cached, so that later runs plan from the same numbers and give byte-identical plans.
//
// The cache is a folder of small JSON files, $XDG_CACHE_HOME/rannc-partition (else
// ~/.cache/rannc-partition), one per machine key: the CPU's model and flags, the CPUs this process
// may run on, the environment's thread settings (OMP_NUM_THREADS, MKL_NUM_THREADS,
// OPENBLAS_NUM_THREADS), ATEN_CPU_CAPABILITY and libtorch's version. Another machine or setting
// gets a measurement of its own. A cache file that cannot be read (corrupt, another format) is
// measured again and replaced, with a warning; a cache that cannot be written leaves the figures
// uncached, with a warning. Processes that start together measure once: the others wait on a lock.
//
// RANNC_CPU_CALIBRATION=fixed keeps the preset's fixed figures and measures nothing: plans then
// do not depend on the machine (the test suite sets it). Where the plugin cannot be loaded the
// fixed figures are used too, with a warning.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "cost_model/device.h"
#include "cost_model/profile_db.h"

namespace rannc {

// `device` with this machine's measured figures when it is the `cpu` preset (measured_here) and
// `profile_db` has no profile of it (whose figures the cost model takes instead); any other
// device as it is. Measures at most once per process. Called after the inputs are checked and
// the model loaded, so that a mistake fails before the machine is measured.
cost::DeviceSpec with_this_cpu(const cost::DeviceSpec& device, const cost::ProfileDb* profile_db);

// What the cache holds for one machine key.
struct CpuCalibration {
  std::string key;          // machine_key() when measured
  cost::MachineFigures figures;
  std::string description;  // the CPU as the plugin saw it: "AMD EPYC, 1 threads, libtorch 1.13.0"
  double seconds = 0;       // how long the measurement took
};

// This machine and its thread settings as one line of text (see above).
std::string machine_key();

// The cache folder, or nullopt when neither XDG_CACHE_HOME (absolute) nor HOME is set.
std::optional<std::filesystem::path> cpu_calibration_folder();

// The file in `folder` that caches the figures of `key`.
std::filesystem::path cpu_calibration_file(const std::filesystem::path& folder, const std::string& key);

// The figures of `key`: cached in `folder`, else measure()'s, then cached there. Problems with the
// cache are one line each on `warnings` (see above); errors of measure() propagate.
CpuCalibration cached_cpu_calibration(const std::filesystem::path& folder, const std::string& key,
                                      const std::function<CpuCalibration()>& measure, std::ostream& warnings);

}  // namespace rannc
