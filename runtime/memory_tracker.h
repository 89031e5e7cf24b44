// Peak bytes of tensor memory on this rank, measured by wrapping libtorch's CPU allocator (the
// same quantity the cost model predicts: weights, gradients, optimizer state, activations and
// buffers, without the program's code and heap).
#pragma once

#include <cstdint>

namespace rannc::runtime {

// Installs the counting allocator for every CPU tensor allocated after the call. Call once,
// before any tensor exists.
void track_cpu_tensor_memory();

std::int64_t peak_tensor_bytes();

}  // namespace rannc::runtime
