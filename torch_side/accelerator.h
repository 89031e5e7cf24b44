// Everything that differs between running on the CPU and on a CUDA GPU, behind one small
// interface: whether a GPU is there, its name, synchronizing, the caching allocator's memory
// figures and an event timer. accelerator.cpp is the only file that calls GPU APIs; it is built
// with them when CMake found a CUDA libtorch (RANNC_WITH_CUDA), and otherwise reports no GPU, so
// every caller runs the same code on the CPU in CI.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rannc::accel {

// Whether this build has GPU support (a CUDA libtorch, docs/gpu.md).
bool built_with_cuda();
// Whether a CUDA GPU can be used now: the build has GPU support and at least one is visible.
bool cuda_available();
int cuda_device_count();

// "cpu", or the GPU's name as the driver reports it (torch.cuda.get_device_name), e.g.
// "NVIDIA H100 80GB HBM3".
std::string device_name(const c10::Device& device);

// Makes `device` the current GPU of this thread (nothing for the CPU).
void set_current_device(const c10::Device& device);
// Waits for the work queued on `device` (nothing for the CPU).
void synchronize(const c10::Device& device);

// The caching allocator's figures of a GPU: bytes held by tensors now and at most since the last
// reset_peak_memory. Not for the CPU (callers count CPU tensors with their own allocators).
std::int64_t allocated_bytes(const c10::Device& device);
std::int64_t peak_allocated_bytes(const c10::Device& device);
void reset_peak_memory(const c10::Device& device);

// Time on a device, summed over intervals each marked by start() and stop(). On a GPU the marks
// are CUDA events on the device's current stream, read only by take_ms(), so marking never
// stalls the host (which keeps queueing work, and transfers keep overlapping it); on the CPU
// it is the steady clock.
class Timer {
 public:
  explicit Timer(const c10::Device& device);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start();
  void stop();
  // The milliseconds of the intervals marked since the last call (on a GPU, once their work is
  // done): their sum, or each of them in the order they were marked.
  double take_ms();
  std::vector<double> take_each_ms();
  // One interval: stop() and take_ms().
  double stop_ms();

 private:
  struct Events;
  c10::Device device_;
  std::unique_ptr<Events> events_;  // GPU only
  std::chrono::steady_clock::time_point begin_;
  std::vector<double> cpu_intervals_ms_;
};

// A point in the work queued on a device: record() marks it on the device's current stream,
// reached() tells whether the device has run everything queued before it (without waiting). On
// the CPU, where work runs as it is issued, every point is reached.
class Marker {
 public:
  explicit Marker(const c10::Device& device);
  ~Marker();
  Marker(const Marker&) = delete;
  Marker& operator=(const Marker&) = delete;
  void record();
  bool reached() const;

 private:
  struct Event;
  c10::Device device_;
  std::unique_ptr<Event> event_;  // GPU only
};

}  // namespace rannc::accel
