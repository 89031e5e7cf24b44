#include "compiler/cpu_calibration.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string_view>

#include "compiler/torch_plugin.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/input_file.h"
#include "support/sha256.h"

namespace rannc {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "rannc-cpu-calibration";
constexpr int kVersion = 1;
constexpr const char* kSetting = "RANNC_CPU_CALIBRATION";
constexpr std::uint64_t kMaxCacheBytes = 64 << 10;
// Environment variables that change the threads or the kernels libtorch trains with.
constexpr const char* kThreadSettings[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                           "ATEN_CPU_CAPABILITY"};

// The first value of `field` ("model name", "flags") in /proc/cpuinfo, or "".
std::string cpuinfo_field(const std::string& field) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name == field) return line.substr(std::min(colon + 2, line.size()));
  }
  return "";
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

json to_json(const CpuCalibration& c) {
  return {{"format", kFormat},
          {"version", kVersion},
          {"key", c.key},
          {"description", c.description},
          {"peak_fp32_flops", c.figures.peak_fp32_flops},
          {"peak_bf16_flops", c.figures.peak_bf16_flops},
          {"mem_bandwidth", c.figures.mem_bandwidth},
          {"op_overhead", c.figures.op_overhead},
          {"seconds", c.seconds}};
}

// A positive, finite figure of at most `max`; std::invalid_argument naming the field otherwise.
double figure(const json& j, const char* name, double max) {
  auto it = j.find(name);
  if (it == j.end()) throw std::invalid_argument(std::string(name) + ": missing");
  double x = it->is_number() ? it->get<double>() : -1;
  if (!std::isfinite(x) || x <= 0 || x > max)
    throw std::invalid_argument(std::string(name) + ": " + json_excerpt(*it) + " is not a plausible measurement");
  return x;
}

std::string text_field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) throw std::invalid_argument(std::string(name) + ": expected a string");
  return it->get<std::string>();
}

CpuCalibration from_json(const json& j) {
  if (!j.is_object() || j.value("format", json()) != kFormat) throw std::invalid_argument("not a " + std::string(kFormat) + " file");
  if (j.value("version", json()) != kVersion) throw std::invalid_argument("version is not " + std::to_string(kVersion));
  CpuCalibration c;
  c.key = text_field(j, "key");
  c.description = text_field(j, "description");
  c.figures.peak_fp32_flops = figure(j, "peak_fp32_flops", 1e18);
  c.figures.peak_bf16_flops = figure(j, "peak_bf16_flops", 1e18);
  c.figures.mem_bandwidth = figure(j, "mem_bandwidth", 1e15);
  c.figures.op_overhead = figure(j, "op_overhead", 1.0);
  c.seconds = figure(j, "seconds", 1e6);
  return c;
}

// The figures cached for `key` in `file`; nullopt when there is no file; an exception saying
// why when the file cannot be used.
std::optional<CpuCalibration> read_cache(const std::filesystem::path& file, const std::string& key) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return std::nullopt;
  std::string text = read_regular_file(file.string(), kMaxCacheBytes, "CPU calibration");
  check_json_depth(text, file.string());
  CpuCalibration cached = from_json(json::parse(text));
  if (cached.key != key) throw std::invalid_argument("measured under another key: " + cached.key);
  return cached;
}

// Held while the cache of one key is read, measured and written, so that processes started
// together measure once (and not on a CPU the others are measuring too). Without a lock file
// (a read-only folder) nothing is held: at worst two processes measure.
class CacheLock {
 public:
  explicit CacheLock(const std::filesystem::path& file) {
    fd_ = ::open((file.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd_ < 0) return;
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~CacheLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;

 private:
  int fd_ = -1;
};

void warn(std::ostream& warnings, const std::string& text) { warnings << "rannc-partition: warning: " << text << "\n"; }

// The measurement by the torch plugin, checked as a cache file would be (a clock that gives 0
// makes an infinite figure).
CpuCalibration measure_with_plugin(const std::string& key) {
  TorchPlugin& plugin = torch_plugin();  // loaded before the clock starts
  auto start = std::chrono::steady_clock::now();
  auto measured = plugin.measure_cpu();
  CpuCalibration c{key, measured.figures, measured.description,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
  return from_json(to_json(c));
}

bool fixed_figures_wanted() {
  const char* setting = std::getenv(kSetting);
  if (!setting || !*setting) return false;
  if (std::string_view(setting) == "fixed") return true;
  throw InputError(std::string(kSetting) + "=" + text_excerpt(setting) + ": unknown setting (known: fixed)");
}

struct ThisCpu {
  cost::MachineFigures figures;
  std::string description;
};

// This machine's figures, saying where they come from, or nullopt (and a warning) when they
// cannot be measured.
std::optional<ThisCpu> this_cpu_figures() {
  std::string key = machine_key();
  auto measure = [&] { return measure_with_plugin(key); };
  try {
    auto folder = cpu_calibration_folder();
    if (!folder) warn(std::cerr, "neither HOME nor XDG_CACHE_HOME is set: the CPU is measured in every run");
    CpuCalibration c = folder ? cached_cpu_calibration(*folder, key, measure, std::cerr) : measure();
    std::string where = folder ? ", cached in " + cpu_calibration_file(*folder, key).string() : "";
    return ThisCpu{c.figures, "this machine: " + c.description + where};
  } catch (const std::exception& e) {
    warn(std::cerr, "cannot measure this CPU (" + first_line(e.what()) + "): the cpu preset's fixed figures are used");
    return std::nullopt;
  }
}

}  // namespace

std::string machine_key() {
  std::string key = "cpu " + cpuinfo_field("model name") + "; flags " + sha256_of_text(cpuinfo_field("flags")).substr(0, 16) +
                    "; " + std::to_string(usable_cpus()) + " usable CPUs";
  for (const char* name : kThreadSettings) {
    if (const char* value = std::getenv(name)) key += std::string("; ") + name + "=" + value;
  }
  return key + "; libtorch " RANNC_TORCH_VERSION;
}

std::optional<std::filesystem::path> cpu_calibration_folder() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return std::filesystem::path(xdg) / "rannc-partition";  // relative ones are invalid
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "rannc-partition";
  return std::nullopt;
}

std::filesystem::path cpu_calibration_file(const std::filesystem::path& folder, const std::string& key) {
  return folder / ("cpu-" + sha256_of_text(key).substr(0, 16) + ".json");
}

CpuCalibration cached_cpu_calibration(const std::filesystem::path& folder, const std::string& key,
                                      const std::function<CpuCalibration()>& measure, std::ostream& warnings) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) {
    warn(warnings, folder.string() + ": cannot create the CPU calibration cache (" + ec.message() + "): the figures are not cached");
    return measure();
  }
  std::filesystem::path file = cpu_calibration_file(folder, key);
  CacheLock lock(file);
  try {
    if (auto cached = read_cache(file, key)) return *cached;
  } catch (const std::exception& e) {
    warn(warnings, file.string() + ": unusable CPU calibration (" + first_line(e.what()) + "): measuring this CPU again");
  }
  CpuCalibration measured = measure();
  try {
    write_file_atomically(file.string(), to_json(measured).dump(1) + "\n", "the CPU calibration");
  } catch (const std::exception& e) {
    warn(warnings, first_line(e.what()) + ": the figures are not cached");
  }
  return measured;
}

cost::DeviceSpec with_this_cpu(const cost::DeviceSpec& device, const cost::ProfileDb* profile_db) {
  if (!device.measured_here || fixed_figures_wanted()) return device;
  if (profile_db && profile_db->device_for_preset(device.name)) return device;
  static const std::optional<ThisCpu> measured = this_cpu_figures();
  return measured ? cost::with_machine_figures(device, measured->figures, measured->description) : device;
}

}  // namespace rannc
