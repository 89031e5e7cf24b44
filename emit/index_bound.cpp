#include "emit/index_bound.h"

#include <algorithm>
#include <limits>
#include <set>
#include <vector>

#include "ir/op_kinds.h"

namespace rannc::emit {

namespace {

// An integer input that indexes nothing is most often a length or a count along a dim of the
// other inputs (sequence lengths): values up to the longest such dim, or {0, 1} without one.
std::int64_t count_bound(const ir::Graph& graph) {
  std::int64_t longest = 1;
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) {
    const auto& type = graph.value(id).type;
    if (!ir::is_floating_point(type.dtype)) continue;
    for (std::size_t d = 0; d < type.shape.size(); ++d)
      if (static_cast<int>(d) != type.batch_dim) longest = std::max(longest, type.shape[d]);
  }
  return longest + 1;
}

}  // namespace

std::int64_t index_bound(const ir::Graph& graph, const std::string& input_name) {
  std::int64_t bound = std::numeric_limits<std::int64_t>::max();
  std::vector<ir::ValueId> pending;
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput))
    if (graph.value(id).name == input_name) pending.push_back(id);
  std::set<ir::ValueId> seen(pending.begin(), pending.end());
  while (!pending.empty()) {
    auto id = pending.back();
    pending.pop_back();
    for (auto op_id : graph.value(id).consumers) {
      const auto& op = graph.op(op_id);
      if (ir::has_op_trait(op.kind, ir::op_trait::kEmbeddingLookup) && op.inputs.size() > 1 && op.inputs[0] != id) {
        const auto& table = graph.value(op.inputs[0]);
        if (table.is_weight() && !table.type.shape.empty()) bound = std::min(bound, table.type.shape.front());
      } else if (ir::has_op_trait(op.kind, ir::op_trait::kIndexPreserving) && op.inputs.front() == id) {
        for (auto out : op.outputs)
          if (seen.insert(out).second) pending.push_back(out);
      }
    }
  }
  return bound == std::numeric_limits<std::int64_t>::max() ? count_bound(graph) : std::max<std::int64_t>(bound, 1);
}

}  // namespace rannc::emit
