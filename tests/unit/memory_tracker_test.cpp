// rannc-run's count of CPU tensor memory (runtime/memory_tracker.h), the peak each rank reports
// against the plan's prediction: every tensor's bytes from allocation to release, and what is
// allocated inside an UncountedAllocations scope (a stage file's source and debug records, kept as
// long as the loaded module) only once count_tensor_memory names it as a tensor's.
#include <ATen/ATen.h>

#include "runtime/memory_tracker.h"

// Last: glog, which libtorch includes, defines a CHECK of its own that would replace Catch's.
#include <catch2/catch.hpp>

namespace rannc::runtime {
namespace {

TEST_CASE("CPU tensor memory: counted from allocation to release, a loader's other allocations left out") {
  track_cpu_tensor_memory();
  const std::int64_t before = current_tensor_bytes();
  {
    at::Tensor counted = at::empty({1024}, at::kFloat);
    CHECK(current_tensor_bytes() == before + 4096);
    CHECK(peak_tensor_bytes() >= before + 4096);
  }
  CHECK(current_tensor_bytes() == before);

  at::Tensor weight, source_text;
  {
    UncountedAllocations loading;
    weight = at::empty({256}, at::kFloat);
    source_text = at::empty({512}, at::kFloat);
  }
  CHECK(current_tensor_bytes() == before);
  count_tensor_memory(weight);
  CHECK(current_tensor_bytes() == before + 1024);
  // A view of it, or naming it again, counts its storage once.
  count_tensor_memory(weight.slice(0, 0, 128));
  count_tensor_memory(weight);
  CHECK(current_tensor_bytes() == before + 1024);
  weight.reset();
  CHECK(current_tensor_bytes() == before);
  // Released uncounted, it takes nothing off the count.
  source_text.reset();
  CHECK(current_tensor_bytes() == before);
  // An undefined tensor is nothing.
  count_tensor_memory(at::Tensor());
  CHECK(current_tensor_bytes() == before);
}

}  // namespace
}  // namespace rannc::runtime
