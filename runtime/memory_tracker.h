// Peak bytes of tensor memory on this rank, measured by wrapping libtorch's CPU allocator (the
// same quantity the cost model predicts: weights, gradients, optimizer state, activations and
// buffers, without the program's code and heap).
#pragma once

#include <cstdint>

namespace at {
class Tensor;
}

namespace rannc::runtime {

// Installs the counting allocator for every CPU tensor allocated after the call. Call once,
// before any tensor exists.
void track_cpu_tensor_memory();

std::int64_t peak_tensor_bytes();
std::int64_t current_tensor_bytes();

// Loading a stage file allocates through the same allocator for what is not a tensor: the
// TorchScript source and debug records that the loaded module keeps, often more than a small
// stage's weights. Allocations on this thread while the scope lives are not counted until
// count_tensor_memory names them as a tensor's.
class UncountedAllocations {
 public:
  UncountedAllocations();
  ~UncountedAllocations();
  UncountedAllocations(const UncountedAllocations&) = delete;
  UncountedAllocations& operator=(const UncountedAllocations&) = delete;
};

// Counts the tensor's storage from now on if an UncountedAllocations scope left it out; a storage
// counted already, or not from the counting allocator, is left as it is.
void count_tensor_memory(const at::Tensor& tensor);

}  // namespace rannc::runtime
