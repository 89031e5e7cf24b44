// The `cpu` preset measured on this machine (compiler/cpu_calibration.h): the cache is read
// instead of measuring again, keyed by machine and thread settings, and a broken cache is
// measured again with a warning. The measurement itself is a stand-in here (the torch plugin's is
// exercised by tests/cli/check_cpu_calibration.py): no timing in unit tests.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "compiler/cpu_calibration.h"
#include "cost_model/device.h"
#include "support/error.h"

using namespace rannc;
using Catch::Contains;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() : path(std::filesystem::temp_directory_path() / ("rannc_cpu_calibration_test_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// A measurement that counts its calls and returns figures that tell the calls apart.
struct FakeMeasurement {
  int calls = 0;
  std::string key;
  CpuCalibration operator()() {
    ++calls;
    CpuCalibration c;
    c.key = key;
    c.description = "test CPU, 1 threads";
    c.figures = {1e11 * calls, 2e11 * calls, 2e10, 5e-6};
    c.seconds = 0.5;
    return c;
  }
};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

CpuCalibration calibrate(const TempDir& dir, FakeMeasurement& fake, std::ostream& warnings) {
  return cached_cpu_calibration(dir.path, fake.key, [&] { return fake(); }, warnings);
}

}  // namespace

TEST_CASE("cpu calibration: measured once, then the same figures from the cache") {
  TempDir dir;
  FakeMeasurement fake{0, "cpu Test; 2 usable CPUs"};
  std::ostringstream warnings;
  CpuCalibration first = calibrate(dir, fake, warnings);
  CHECK(fake.calls == 1);
  CHECK(std::filesystem::exists(cpu_calibration_file(dir.path, fake.key)));
  CpuCalibration again = calibrate(dir, fake, warnings);
  CHECK(fake.calls == 1);  // read, not measured
  CHECK(again.figures.peak_fp32_flops == first.figures.peak_fp32_flops);  // bit for bit: plans stay identical
  CHECK(again.figures.peak_bf16_flops == first.figures.peak_bf16_flops);
  CHECK(again.figures.mem_bandwidth == first.figures.mem_bandwidth);
  CHECK(again.figures.op_overhead == first.figures.op_overhead);
  CHECK(again.description == first.description);
  CHECK(warnings.str().empty());
}

TEST_CASE("cpu calibration: another machine key is measured on its own") {
  TempDir dir;
  FakeMeasurement one{0, "cpu Test; 2 usable CPUs"}, other{0, "cpu Test; 2 usable CPUs; OMP_NUM_THREADS=2"};
  std::ostringstream warnings;
  calibrate(dir, one, warnings);
  calibrate(dir, other, warnings);
  CHECK(other.calls == 1);
  CHECK(cpu_calibration_file(dir.path, one.key) != cpu_calibration_file(dir.path, other.key));
  calibrate(dir, one, warnings);
  CHECK(one.calls == 1);  // its own file is still there
}

TEST_CASE("cpu calibration: a corrupt or foreign cache file is measured again, with one warning") {
  TempDir dir;
  FakeMeasurement fake{0, "cpu Test"};
  std::ostringstream warnings;
  calibrate(dir, fake, warnings);
  auto file = cpu_calibration_file(dir.path, fake.key);
  for (const char* text : {"{\"format\": \"rannc-cpu-calibration\", \"vers", "[1, 2]",
                           "{\"format\": \"rannc-cpu-calibration\", \"version\": 1, \"key\": \"cpu Test\", "
                           "\"description\": \"x\", \"peak_fp32_flops\": -1, \"peak_bf16_flops\": 1, "
                           "\"mem_bandwidth\": 1, \"op_overhead\": 1e-6, \"seconds\": 1}"}) {
    std::ofstream(file) << text;
    std::ostringstream warned;
    int calls = fake.calls;
    CpuCalibration c = calibrate(dir, fake, warned);
    CHECK(fake.calls == calls + 1);
    std::string warning = warned.str();
    CHECK_THAT(warning, Contains(file.string() + ": unusable CPU calibration") && Contains("measuring this CPU again"));
    CHECK(std::count(warning.begin(), warning.end(), '\n') == 1);
    CHECK(c.figures.peak_fp32_flops == 1e11 * fake.calls);
  }
  // Copied from another key's file: measured again rather than trusted.
  FakeMeasurement other{0, "cpu Other"};
  std::filesystem::copy_file(file, cpu_calibration_file(dir.path, other.key));
  std::ostringstream warned;
  calibrate(dir, other, warned);
  CHECK(other.calls == 1);
  CHECK_THAT(warned.str(), Contains("measured under another key: cpu Test"));
  calibrate(dir, other, warned);
  CHECK(other.calls == 1);  // and the measurement replaced it
}

TEST_CASE("cpu calibration: a cache that cannot be made leaves the figures uncached, with a warning") {
  TempDir dir;
  std::ofstream(dir.path) << "a file where the cache folder should be";
  FakeMeasurement fake{0, "cpu Test"};
  std::ostringstream warnings;
  CpuCalibration c = calibrate(dir, fake, warnings);
  CHECK(c.figures.peak_fp32_flops == 1e11);
  CHECK_THAT(warnings.str(), Contains("cannot create the CPU calibration cache") && Contains("the figures are not cached"));
  calibrate(dir, fake, warnings);
  CHECK(fake.calls == 2);
}

TEST_CASE("cpu calibration: the key names the CPU and the settings that change its threads and kernels") {
  std::string plain = machine_key();
  CHECK_THAT(plain, Contains("usable CPUs") && Contains("libtorch "));
  ScopedEnv threads("OMP_NUM_THREADS", "3");
  ScopedEnv capability("ATEN_CPU_CAPABILITY", "avx2");
  std::string set = machine_key();
  CHECK_THAT(set, Contains("OMP_NUM_THREADS=3") && Contains("ATEN_CPU_CAPABILITY=avx2"));
  CHECK(set != plain);
}

TEST_CASE("cpu calibration: only the cpu preset is measured, and RANNC_CPU_CALIBRATION=fixed keeps its figures") {
  const cost::DeviceSpec& cpu = *cost::find_device_preset("cpu");
  const cost::DeviceSpec& a100 = *cost::find_device_preset("a100-80g");
  CHECK(cpu.measured_here);
  CHECK_FALSE(a100.measured_here);
  CHECK(with_this_cpu(a100, nullptr).peak_fp32_flops == a100.peak_fp32_flops);
  {
    ScopedEnv fixed("RANNC_CPU_CALIBRATION", "fixed");
    CHECK(with_this_cpu(cpu, nullptr).peak_fp32_flops == cpu.peak_fp32_flops);
  }
  ScopedEnv wrong("RANNC_CPU_CALIBRATION", "maybe");
  CHECK_THROWS_WITH(with_this_cpu(cpu, nullptr), "RANNC_CPU_CALIBRATION=maybe: unknown setting (known: fixed)");

  cost::MachineFigures figures{50e9, 120e9, 15e9, 8e-6};
  cost::DeviceSpec measured = cost::with_machine_figures(cpu, figures, "this machine");
  CHECK(measured.peak_fp32_flops == 50e9);
  CHECK(measured.peak_half_flops == 120e9);
  CHECK(measured.mem_bandwidth == 15e9);
  CHECK(measured.op_overhead == 8e-6);
  CHECK(measured.mem_bytes == cpu.mem_bytes);  // memory and links stay the preset's
  CHECK(measured.intra_node.bandwidth == cpu.intra_node.bandwidth);
}
