// The signature of an op: its kind and the types of its inputs, which is all that decides how
// long it takes. Repeated layers share signatures, so the profiler times each once and the
// profile DB is keyed by it.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace rannc::cost {

// "aten::linear(f32[8,16,128]*,f32[384,128]*,f32[384]*)": tensors as dtype and shape, with
// '*' when they require grad (it decides which gradients backward computes); scalars and lists
// by value; ONNX attributes after the inputs in braces, sorted by name.
std::string op_signature(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad);
// The signature of rannc-run's training loss of `input` (op_work.h's loss_work), measured like an op.
std::string loss_signature(const ir::Value& input);

}  // namespace rannc::cost
