#include "runtime/memory_tracker.h"

#include <atomic>
#include <new>

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <c10/core/impl/alloc_cpu.h>

#include "torch_side/torch_version.h"

namespace rannc::runtime {
namespace {

std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_peak{0};
thread_local int g_uncounted_depth = 0;  // UncountedAllocations scopes alive on this thread

void count(std::int64_t bytes) {
  auto now = g_current.fetch_add(bytes) + bytes;
  auto peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// What each block records before its data: its size, and whether it is counted now.
struct BlockHeader {
  std::size_t bytes;
  bool counted;
};

// Allocates like libtorch's CPU allocator, with a BlockHeader before the data so the release can
// be counted. The data pointer doubles as the deleter's context, which libtorch's raw_allocate
// (used by some kernels and by Gloo) requires.
class CountingAllocator final : public c10::Allocator {
 public:
  RANNC_ALLOCATOR_ALLOCATE(bytes) {
    auto* block = static_cast<char*>(c10::alloc_cpu(bytes + kHeader));
    auto* header = new (block) BlockHeader{bytes, g_uncounted_depth == 0};
    if (header->counted) count(static_cast<std::int64_t>(bytes));
    void* data = block + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  RANNC_ALLOCATOR_COPY_DATA

  static BlockHeader& header_of(void* data) { return *reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeader); }

  static void release(void* data) {
    if (data == nullptr) return;
    const BlockHeader& header = header_of(data);
    if (header.counted) count(-static_cast<std::int64_t>(header.bytes));
    c10::free_cpu(static_cast<char*>(data) - kHeader);
  }

 private:
  static constexpr std::size_t kHeader = c10::gAlignment;  // keeps the data as aligned as libtorch's
  static_assert(sizeof(BlockHeader) <= kHeader, "the header fits before the aligned data");
};

}  // namespace

void track_cpu_tensor_memory() {
  static CountingAllocator allocator;
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
}

std::int64_t peak_tensor_bytes() { return g_peak.load(); }

std::int64_t current_tensor_bytes() { return g_current.load(); }

UncountedAllocations::UncountedAllocations() { ++g_uncounted_depth; }

UncountedAllocations::~UncountedAllocations() { --g_uncounted_depth; }

void count_tensor_memory(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.has_storage() || !tensor.is_cpu()) return;
  const c10::DataPtr& data = tensor.storage().data_ptr();
  if (data.get() == nullptr || data.get_deleter() != &CountingAllocator::release) return;
  BlockHeader& header = CountingAllocator::header_of(data.get());
  if (header.counted) return;
  header.counted = true;
  count(static_cast<std::int64_t>(header.bytes));
}

}  // namespace rannc::runtime
