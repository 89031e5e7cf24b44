#include "runtime/memory_tracker.h"

#include <atomic>

#include <c10/core/CPUAllocator.h>

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

// Forwards to libtorch's allocator; each block carries its size so the release can be counted.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(std::size_t bytes) const override {
    auto inner = base_->allocate(bytes);
    void* data = inner.get();
    auto device = inner.device();
    auto* block = new Block{std::move(inner), static_cast<std::int64_t>(bytes)};
    count(block->bytes);
    return {data, block, &release, device};
  }

 private:
  struct Block {
    c10::DataPtr inner;
    std::int64_t bytes;
  };

  static void release(void* context) {
    auto* block = static_cast<Block*>(context);
    count(-block->bytes);
    delete block;  // frees the memory through the base allocator's DataPtr
  }

  c10::Allocator* base_;
};

}  // namespace

void track_cpu_tensor_memory() {
  static CountingAllocator allocator(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
}

std::int64_t current_tensor_bytes() { return g_current.load(); }
std::int64_t peak_tensor_bytes() { return g_peak.load(); }

}  // namespace rannc::runtime
