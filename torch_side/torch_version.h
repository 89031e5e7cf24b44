// The libtorch version the build uses, for guards around API differences between the Debian
// libtorch 1.13 and PyTorch 2.x installs (docs/gpu.md).
#pragma once

#include <torch/version.h>

#define RANNC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10::Allocator: libtorch 2.3 made allocate() non-const and added the pure virtual copy_data().
// An allocator declares its allocate() with RANNC_ALLOCATOR_ALLOCATE and adds
// RANNC_ALLOCATOR_COPY_DATA to its members.
#if RANNC_TORCH_AT_LEAST(2, 3)
#define RANNC_ALLOCATOR_ALLOCATE(bytes) c10::DataPtr allocate(std::size_t bytes) override
#define RANNC_ALLOCATOR_COPY_DATA                                                  \
  void copy_data(void* dest, const void* src, std::size_t count) const override { \
    default_copy_data(dest, src, count);                                           \
  }
#else
#define RANNC_ALLOCATOR_ALLOCATE(bytes) c10::DataPtr allocate(std::size_t bytes) const override
#define RANNC_ALLOCATOR_COPY_DATA
#endif
