#include "ir/batch_dims.h"

#include <algorithm>
#include <limits>
#include <string>

#include "ir/op_kinds.h"
#include "support/error.h"

namespace rannc::ir {
namespace {

// Ops that read only the metadata of their tensor inputs, never their contents (size queries,
// *_like constructors: op_trait::kReadsOnlyMetadata in ir/op_kinds.def).
bool reads_only_metadata(const std::string& kind) { return has_op_trait(kind, op_trait::kReadsOnlyMetadata); }

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
  for (auto id : graph.values_with_role(ValueRole::kModelInput)) {
    graph.value(id).batch_dependent = true;
    graph.value(id).data_dependent = true;
  }
  for (auto op_id : graph.topological_order()) {
    const Op& op = graph.op(op_id);
    bool depends = false, reads_data = false;
    for (auto input : op.inputs) {
      depends = depends || graph.value(input).batch_dependent;
      reads_data = reads_data || graph.value(input).data_dependent;
    }
    reads_data = reads_data && !reads_only_metadata(op.kind);
    // What an op writes in place holds what it computes: a mask of zeros filled from the batch
    // is data, read by the ops after the write.
    std::vector<ValueId> changed = op.outputs;
    changed.insert(changed.end(), op.writes.begin(), op.writes.end());
    for (auto id : changed) {
      graph.value(id).batch_dependent = graph.value(id).batch_dependent || depends;
      graph.value(id).data_dependent = graph.value(id).data_dependent || reads_data;
    }
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

void scale_batch(Graph& graph, std::int64_t evaluated, std::int64_t batch) {
  if (evaluated == batch) return;
  for (const auto& v : graph.values()) {
    if (!v.is_tensor() || v.type.batch_dim < 0) continue;
    auto& size = graph.value(v.id).type.shape.at(static_cast<std::size_t>(v.type.batch_dim));
    if (size < 0) continue;
    // size x batch / evaluated, rounded, in 128 bits: both factors may be near 2^31 and beyond.
    __int128 scaled = (static_cast<__int128>(size) * batch + evaluated / 2) / evaluated;
    if (scaled > std::numeric_limits<std::int64_t>::max() / 16) {
      throw InputError("a batch of " + std::to_string(batch) + " makes tensor '" + v.name + "' too large to describe");
    }
    size = static_cast<std::int64_t>(std::max<__int128>(scaled, 1));
  }
  for (const auto& v : graph.values()) {
    const auto& shape = v.type.shape;
    if (!v.is_tensor() || v.type.batch_dim < 0 || std::any_of(shape.begin(), shape.end(), [](auto d) { return d < 0; }))
      continue;
    auto numel = checked_numel(shape);
    if (!numel || *numel > std::numeric_limits<std::int64_t>::max() / 16) {
      throw InputError("a batch of " + std::to_string(batch) + " makes tensor '" + v.name + "' too large to describe");
    }
  }
}

}  // namespace rannc::ir
