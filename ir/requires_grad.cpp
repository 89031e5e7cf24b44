#include "ir/requires_grad.h"

#include <algorithm>
#include <string>

#include "ir/op_kinds.h"

namespace rannc::ir {
namespace {

// Ops whose floating outputs never carry a gradient (op_trait::kNoGradOutput in ir/op_kinds.def).
bool is_detaching(const std::string& kind) { return has_op_trait(kind, op_trait::kNoGradOutput); }

}  // namespace

std::vector<bool> values_requiring_grad(const Graph& graph) {
  std::vector<bool> requires_grad(graph.values().size(), false);
  for (const auto& value : graph.values()) {
    if (value.role == ValueRole::kParam) requires_grad[static_cast<std::size_t>(value.id)] = true;
  }
  for (OpId id : graph.topological_order()) {
    const Op& op = graph.op(id);
    if (is_detaching(op.kind)) continue;
    bool any = std::any_of(op.inputs.begin(), op.inputs.end(),
                           [&](ValueId input) { return requires_grad[static_cast<std::size_t>(input)]; });
    if (!any) continue;
    for (ValueId output : op.outputs) {
      const Value& value = graph.value(output);
      // kOther holds tensor lists and tuples (prim::ListConstruct feeding aten::cat).
      bool differentiable = value.is_tensor() ? is_floating_point(value.type.dtype) : value.kind == ValueKind::kOther;
      if (differentiable) requires_grad[static_cast<std::size_t>(output)] = true;
    }
  }
  return requires_grad;
}

}  // namespace rannc::ir
