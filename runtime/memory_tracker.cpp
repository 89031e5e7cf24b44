#include "runtime/memory_tracker.h"

#include <atomic>

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>

#include "torch_side/torch_version.h"

namespace rannc::runtime {
namespace {

std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};

void count(std::int64_t bytes) {
  auto now = g_current.fetch_add(bytes) + bytes;
  auto peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// Allocates like libtorch's CPU allocator, with the block's size in a header before the data so
// the release can be counted. The data pointer doubles as the deleter's context, which libtorch's
// raw_allocate (used by some kernels and by Gloo) requires.
class CountingAllocator final : public c10::Allocator {
 public:
  RANNC_ALLOCATOR_ALLOCATE(bytes) {
    auto* block = static_cast<char*>(c10::alloc_cpu(bytes + kHeader));
    *reinterpret_cast<std::size_t*>(block) = bytes;
    count(static_cast<std::int64_t>(bytes));
    void* data = block + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  RANNC_ALLOCATOR_COPY_DATA

 private:
  static constexpr std::size_t kHeader = c10::gAlignment;  // keeps the data as aligned as libtorch's

  static void release(void* data) {
    if (data == nullptr) return;
    auto* block = static_cast<char*>(data) - kHeader;
    count(-static_cast<std::int64_t>(*reinterpret_cast<std::size_t*>(block)));
    c10::free_cpu(block);
  }
};

}  // namespace

void track_cpu_tensor_memory() {
  static CountingAllocator allocator;
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
}

std::int64_t peak_tensor_bytes() { return g_peak.load(); }

}  // namespace rannc::runtime
