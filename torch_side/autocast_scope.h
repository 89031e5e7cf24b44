// libtorch's autocast turned on for one device type while a scope lives, as
// torch.autocast(device, dtype) does: the plan's bf16-mixed precision (runtime/stage_runner.cpp)
// and the recomputation of an attention core in backward, which must cast as its forward did
// (torch_side/recompute_cores.cpp). libtorch 2.4 made the autocast state per device type;
// before, the CPU and CUDA had calls of their own. Header-only: rannc-run includes it.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>

#include <stdexcept>

#include "torch_side/torch_version.h"

namespace rannc {

class AutocastScope {
 public:
  AutocastScope(bool on, c10::DeviceType type, at::ScalarType dtype = at::kBFloat16) : on_(on), type_(type) {
    if (!on_) return;
    was_enabled_ = enabled(type_);
    was_dtype_ = autocast_dtype(type_);
    set(type_, true, dtype);
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!on_) return;
    // The weights' casts are cached while autocast is on; they must not outlive the scope.
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(type_, was_enabled_, was_dtype_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  // Whether autocast is on for the device type now, and the dtype it casts to.
  static bool enabled(c10::DeviceType type) {
#if RANNC_TORCH_AT_LEAST(2, 4)
    return at::autocast::is_autocast_enabled(type);
#else
    return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
  }
  static at::ScalarType autocast_dtype(c10::DeviceType type) {
#if RANNC_TORCH_AT_LEAST(2, 4)
    return at::autocast::get_autocast_dtype(type);
#else
    return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
#endif
  }

 private:
  static void set(c10::DeviceType type, bool on, at::ScalarType dtype) {
#if RANNC_TORCH_AT_LEAST(2, 4)
    at::autocast::set_autocast_enabled(type, on);
    at::autocast::set_autocast_dtype(type, dtype);
#else
    if (type != c10::DeviceType::CPU) throw std::runtime_error("autocast on a GPU needs libtorch 2.4 or later here");
    at::autocast::set_cpu_enabled(on);
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
  }

  bool on_;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

}  // namespace rannc
