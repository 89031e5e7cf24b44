// Which values carry a gradient in training: the trainable parameters and every floating-point
// tensor computed from one. The backward pass computes a gradient for exactly these, so an op
// whose data input does not require grad (the first layer) skips its input gradient.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace rannc::ir {

// Indexed by value id. Non-differentiable ops (detach, comparisons, argmax, sizes) stop the
// flow: their outputs are not floating point or are detached.
std::vector<bool> values_requiring_grad(const Graph& graph);

}  // namespace rannc::ir
