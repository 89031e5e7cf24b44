// Bounds for integer model inputs, so that tools which make up inputs (verify, rannc-run without
// --data) draw only valid indices.
#pragma once

#include <cstdint>
#include <string>

#include "ir/graph.h"

namespace rannc::emit {

// Integer inputs are indices more often than not: the exclusive bound keeps each below the
// smallest table it is looked up in (following reshapes and slices of it), so every lookup is
// valid and gradients reach many rows. An input that indexes nothing is taken for a length or
// a count: values up to the longest non-batch dim of the float inputs (or {0, 1} without one).
std::int64_t index_bound(const ir::Graph& graph, const std::string& input_name);

}  // namespace rannc::emit
