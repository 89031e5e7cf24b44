#include "ir/batch_dims.h"

namespace rannc::ir {
namespace {

int first_differing_dim(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) return -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] >= 0 && b[i] >= 0 && a[i] != b[i]) return static_cast<int>(i);
  }
  return -1;
}

int first_dim_of_size(const std::vector<std::int64_t>& shape, std::int64_t size) {
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == size) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

void propagate_batch_dependence(Graph& graph) {
  for (auto id : graph.values_with_role(ValueRole::kModelInput)) graph.value(id).batch_dependent = true;
  for (auto op_id : graph.topological_order()) {
    const Op& op = graph.op(op_id);
    bool depends = false;
    for (auto input : op.inputs) depends = depends || graph.value(input).batch_dependent;
    if (!depends) continue;
    for (auto output : op.outputs) graph.value(output).batch_dependent = true;
  }
}

void assign_batch_dims(Graph& graph, std::int64_t batch, const ShapesAtDoubleBatch& at_double_batch) {
  propagate_batch_dependence(graph);
  for (const auto& v : graph.values()) {
    if (!v.is_tensor() || v.is_weight()) continue;
    auto id = static_cast<std::size_t>(v.id);
    Value& value = graph.value(v.id);
    if (id < at_double_batch.size() && at_double_batch[id]) {
      value.type.batch_dim = first_differing_dim(value.type.shape, *at_double_batch[id]);
      if (value.type.batch_dim >= 0) value.batch_dependent = true;
    } else if (value.batch_dependent) {
      value.type.batch_dim = first_dim_of_size(value.type.shape, batch);
    }
  }
}

}  // namespace rannc::ir
