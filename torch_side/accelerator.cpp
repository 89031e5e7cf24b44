// The GPU side of accelerator.h. With RANNC_WITH_CUDA (a CUDA libtorch of version 2.9 or later,
// whose device-generic at::accelerator API and c10::Event timing this uses) it drives the GPU;
// otherwise it is the CPU-only build: no GPU, and the GPU-only calls are never reached.
#include "torch_side/accelerator.h"

#include <stdexcept>
#include <utility>
#include <vector>

#include "torch_side/torch_version.h"

#ifdef RANNC_WITH_CUDA
#if !RANNC_TORCH_AT_LEAST(2, 9)
#error "GPU support needs libtorch 2.9 or later (at::accelerator); configure with -DRANNC_CUDA=OFF"
#endif
#include <ATen/DeviceAccelerator.h>
#include <c10/core/Event.h>
#include <dlfcn.h>
#endif

namespace rannc::accel {
namespace {

[[noreturn]] void cpu_has_no(const char* what) {
  throw std::logic_error(std::string("accelerator: ") + what + " of the CPU");
}

#ifdef RANNC_WITH_CUDA
c10::DeviceIndex index_of(const c10::Device& device) {
  if (!device.is_cuda()) cpu_has_no("GPU figures");
  return device.has_index() ? device.index() : at::accelerator::getDeviceIndex();
}

// The driver's name of a GPU, read through libcuda (loaded by libtorch already), so no CUDA
// header is needed: cuDeviceGetName is what torch.cuda.get_device_name reports too.
std::string driver_device_name(int ordinal) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) return "CUDA GPU " + std::to_string(ordinal);
  using Init = int (*)(unsigned);
  using Get = int (*)(int*, int);
  using Name = int (*)(char*, int, int);
  auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
  auto get = reinterpret_cast<Get>(dlsym(cuda, "cuDeviceGet"));
  auto name = reinterpret_cast<Name>(dlsym(cuda, "cuDeviceGetName"));
  char text[256] = {0};
  int handle = 0;
  if (!init || !get || !name || init(0) != 0 || get(&handle, ordinal) != 0 || name(text, sizeof text, handle) != 0)
    return "CUDA GPU " + std::to_string(ordinal);
  return text;
}

const c10::CachingAllocator::Stat& allocated(const c10::Device& device, c10::CachingDeviceAllocator::DeviceStats& stats) {
  stats = at::accelerator::getDeviceStats(index_of(device));
  return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
}
#endif

}  // namespace

#ifdef RANNC_WITH_CUDA

bool built_with_cuda() { return true; }

bool cuda_available() {
  auto type = at::accelerator::getAccelerator(false);
  return type && *type == c10::DeviceType::CUDA && at::accelerator::deviceCount() > 0;
}

int cuda_device_count() { return cuda_available() ? static_cast<int>(at::accelerator::deviceCount()) : 0; }

std::string device_name(const c10::Device& device) {
  return device.is_cuda() ? driver_device_name(index_of(device)) : "cpu";
}

void set_current_device(const c10::Device& device) {
  if (device.is_cuda()) at::accelerator::setDeviceIndex(index_of(device));
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(index_of(device));
}

std::int64_t allocated_bytes(const c10::Device& device) {
  c10::CachingDeviceAllocator::DeviceStats stats;
  return allocated(device, stats).current;
}

std::int64_t peak_allocated_bytes(const c10::Device& device) {
  c10::CachingDeviceAllocator::DeviceStats stats;
  return allocated(device, stats).peak;
}

void reset_peak_memory(const c10::Device& device) { at::accelerator::resetPeakStats(index_of(device)); }

// The begin and end events of each interval not yet taken.
struct Timer::Events {
  std::vector<std::pair<c10::Event, c10::Event>> intervals;

  void begin(const c10::Device& device) {
    auto& interval = intervals.emplace_back(c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT),
                                            c10::Event(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT));
    interval.first.record(at::accelerator::getCurrentStream(index_of(device)));
  }
  void end(const c10::Device& device) { intervals.back().second.record(at::accelerator::getCurrentStream(index_of(device))); }
  std::vector<double> take_each_ms() {
    std::vector<double> ms;
    for (auto& [begin, end] : intervals) {
      end.synchronize();
      ms.push_back(begin.elapsedTime(end));
    }
    intervals.clear();
    return ms;
  }
};

struct Marker::Event {
  c10::Event event{c10::DeviceType::CUDA, c10::EventFlag::PYTORCH_DEFAULT};
};

void Marker::record() {
  if (event_) event_->event.record(at::accelerator::getCurrentStream(index_of(device_)));
}

bool Marker::reached() const { return !event_ || event_->event.query(); }

#else  // the CPU-only build

bool built_with_cuda() { return false; }
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string device_name(const c10::Device&) { return "cpu"; }
void set_current_device(const c10::Device&) {}
void synchronize(const c10::Device&) {}
std::int64_t allocated_bytes(const c10::Device&) { cpu_has_no("allocated bytes"); }
std::int64_t peak_allocated_bytes(const c10::Device&) { cpu_has_no("peak allocated bytes"); }
void reset_peak_memory(const c10::Device&) { cpu_has_no("peak memory"); }

// Never made: no device is a GPU in this build.
struct Marker::Event {};
void Marker::record() {}
bool Marker::reached() const { return true; }

struct Timer::Events {
  void begin(const c10::Device&) {}
  void end(const c10::Device&) {}
  std::vector<double> take_each_ms() { return {}; }
};

#endif

Timer::Timer(const c10::Device& device) : device_(device) {
  if (device.is_cuda() && !built_with_cuda()) throw std::logic_error("accelerator: a GPU timer in a build without GPU support");
  if (device.is_cuda()) events_ = std::make_unique<Events>();
}

Timer::~Timer() = default;

Marker::Marker(const c10::Device& device) : device_(device) {
  if (device.is_cuda() && !built_with_cuda()) throw std::logic_error("accelerator: a GPU marker in a build without GPU support");
  if (device.is_cuda()) event_ = std::make_unique<Event>();
}

Marker::~Marker() = default;

void Timer::start() {
  if (events_) events_->begin(device_);
  else begin_ = std::chrono::steady_clock::now();
}

void Timer::stop() {
  if (events_) events_->end(device_);
  else cpu_intervals_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin_).count());
}

std::vector<double> Timer::take_each_ms() {
  if (events_) return events_->take_each_ms();
  return std::exchange(cpu_intervals_ms_, {});
}

double Timer::take_ms() {
  double ms = 0;
  for (double interval : take_each_ms()) ms += interval;
  return ms;
}

double Timer::stop_ms() {
  stop();
  return take_ms();
}

}  // namespace rannc::accel
