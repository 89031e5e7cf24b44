#include "partitioner/units.h"

#include <algorithm>

#include "support/error.h"

namespace rannc::partition {
namespace {

// An op that computes a tensor from the contents of the batch. What is computed from shapes
// alone (a batch size turned into a tensor, a mask built from a length, a weight sliced to the
// sequence length) is glue: each stage recomputes it at its own replicas' batch, where sending
// it would carry the sender's batch size to a stage that runs another.
bool is_batch_op(const ir::Graph& graph, const ir::Op& op) {
  return std::any_of(op.outputs.begin(), op.outputs.end(), [&](ir::ValueId id) {
    const auto& value = graph.value(id);
    return value.is_tensor() && value.data_dependent;
  });
}

// Gathers the glue of units, each op at most once per unit.
struct GlueCollector {
  const ir::Graph& graph;
  const std::vector<int>& unit_of_anchor;
  const std::vector<int>& position;  // op -> index in the topological order
  std::vector<int>& stamp;           // op -> the last unit that took it

  // Appends to `out` the glue that `op` of unit `unit` (anchored at `anchor`) needs, transitively:
  // the producers of its inputs that are not batch ops, and the glue ops that write in place into
  // what it computes before the anchor runs (a mask is complete only after the fills of its
  // slices, which nothing reads; an append to a list after the anchor changes nothing it read).
  void collect(ir::OpId op, ir::OpId anchor, int unit, std::vector<ir::OpId>& out) {
    std::vector<ir::OpId> needed;
    for (auto input : graph.op(op).inputs)
      if (graph.value(input).producer != ir::kNoId) needed.push_back(graph.value(input).producer);
    for (auto output : graph.op(op).outputs)
      for (auto writer : graph.value(output).writers)
        if (position_of(writer) < position_of(anchor)) needed.push_back(writer);
    for (auto glue : needed) {
      if (unit_of_anchor[static_cast<std::size_t>(glue)] >= 0 || stamp[static_cast<std::size_t>(glue)] == unit) continue;
      stamp[static_cast<std::size_t>(glue)] = unit;
      out.push_back(glue);
      collect(glue, anchor, unit, out);
    }
  }

  int position_of(ir::OpId op) const { return position[static_cast<std::size_t>(op)]; }
};

// Glue no unit reaches (dead code, or non-batch model outputs) still has to run somewhere: the last unit.
void attach_orphan_glue(const std::vector<int>& stamp, const std::vector<int>& unit_of_anchor, UnitGraph& result) {
  auto& last = result.units.back().ops;
  for (std::size_t op = 0; op < stamp.size(); ++op) {
    if (stamp[op] < 0 && unit_of_anchor[op] < 0) last.push_back(static_cast<ir::OpId>(op));
  }
}

void sort_by_position(std::vector<ir::OpId>& ops, const std::vector<int>& position) {
  std::sort(ops.begin(), ops.end(), [&](ir::OpId a, ir::OpId b) {
    return position[static_cast<std::size_t>(a)] < position[static_cast<std::size_t>(b)];
  });
}

// Tensors read by a unit other than the one producing them, with their consumer units.
void collect_crossing_tensors(const ir::Graph& graph, UnitGraph& result) {
  std::vector<int> index_of(graph.values().size(), -1);
  auto producer_unit = [&](const ir::Value& value) {
    return value.producer == ir::kNoId ? -1 : result.unit_of_anchor[static_cast<std::size_t>(value.producer)];
  };
  auto tensor_for = [&](const ir::Value& value) -> CrossingTensor& {
    int& index = index_of[static_cast<std::size_t>(value.id)];
    if (index < 0) {
      index = static_cast<int>(result.tensors.size());
      result.tensors.push_back({value.id, producer_unit(value), {}, value.model_output});
    }
    return result.tensors[static_cast<std::size_t>(index)];
  };
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) tensor_for(graph.value(id));
  for (int unit = 0; unit < static_cast<int>(result.units.size()); ++unit) {
    for (auto op : result.units[static_cast<std::size_t>(unit)].ops) {
      for (auto input : graph.op(op).inputs) {
        const auto& value = graph.value(input);
        bool from_unit = value.producer != ir::kNoId && producer_unit(value) >= 0;
        bool model_input = value.role == ir::ValueRole::kModelInput;
        if (!value.is_tensor() || !(from_unit || model_input) || producer_unit(value) == unit) continue;
        auto& consumers = tensor_for(value).consumers;
        if (consumers.empty() || consumers.back() != unit) consumers.push_back(unit);
      }
    }
  }
  // Model outputs computed by a unit are sent on even when no other unit reads them.
  for (auto id : graph.model_outputs()) {
    const auto& value = graph.value(id);
    if (value.is_tensor() && producer_unit(value) >= 0) tensor_for(value).model_output = true;
  }
}

// The batch size the shapes are at: the size of the model inputs' batch dim (0 if none has one).
std::int64_t evaluated_batch(const ir::Graph& graph) {
  std::int64_t batch = 0;
  for (auto id : graph.values_with_role(ir::ValueRole::kModelInput)) {
    const auto& type = graph.value(id).type;
    if (type.batch_dim < 0) continue;
    auto size = type.shape[static_cast<std::size_t>(type.batch_dim)];
    batch = batch == 0 ? size : std::min(batch, size);
  }
  return batch;
}

// Whether replicas may cut the tensor into slices of samples along its batch dim: not when that
// dim holds the batch times another factor (batch x heads after a view, time x batch) or a part
// of it, where a slice of samples is no slice of the dim (and time x batch interleaves them).
bool sliceable(const ir::Value& value, std::int64_t batch) {
  const auto& type = value.type;
  return type.batch_dim < 0 || batch == 0 || type.shape[static_cast<std::size_t>(type.batch_dim)] == batch;
}

// Whether an op after `writer` reads `value` itself (not the writer's result): it must see the write.
bool read_after_write(const ir::Value& value, ir::OpId writer, const std::vector<int>& position) {
  auto at = [&](ir::OpId op) { return position[static_cast<std::size_t>(op)]; };
  return std::any_of(value.consumers.begin(), value.consumers.end(), [&](ir::OpId reader) {
    const auto& writers = value.writers;
    return at(reader) > at(writer) && std::find(writers.begin(), writers.end(), reader) == writers.end();
  });
}

// For each unit, the last unit that must run in the same stage as it (itself if none):
// - a tensor whose batch dim holds another factor (not sliceable) stays with its last consumer;
// - so does a tensor with a dim shape inference left unknown (an ONNX Expand to a shape computed
//   at run time): stages exchange tensors of the shapes the plan gives;
// - a tensor written in place and read after the write stays with its writer: a stage sends a
//   tensor as its producer's stage has it, which would not hold a write made in a later stage.
std::vector<int> unit_reach(const ir::Graph& graph, const std::vector<int>& position, const UnitGraph& result) {
  std::vector<int> reach(result.units.size());
  for (std::size_t u = 0; u < reach.size(); ++u) reach[u] = static_cast<int>(u);
  auto unit_of = [&](ir::OpId op) { return result.unit_of_anchor[static_cast<std::size_t>(op)]; };
  std::int64_t batch = evaluated_batch(graph);
  for (const auto& tensor : result.tensors) {
    if (tensor.producer < 0 || tensor.consumers.empty()) continue;
    const auto& value = graph.value(tensor.value);
    if (sliceable(value, batch) && (!value.is_tensor() || value.type.shape_known())) continue;
    auto& end = reach[static_cast<std::size_t>(tensor.producer)];
    end = std::max(end, tensor.consumers.back());
  }
  for (const auto& value : graph.values()) {
    if (value.producer == ir::kNoId || unit_of(value.producer) < 0) continue;  // glue takes its writers along
    auto& end = reach[static_cast<std::size_t>(unit_of(value.producer))];
    for (auto writer : value.writers)
      if (read_after_write(value, writer, position)) end = std::max(end, unit_of(writer));
  }
  return reach;
}

// Units from each unit to its reach become one unit, so no cut separates them (units are in a
// topological order, so runs of them stay acyclic).
void merge_units_kept_together(const ir::Graph& graph, const std::vector<int>& position, UnitGraph& result) {
  auto reach = unit_reach(graph, position, result);
  bool any = false;
  for (std::size_t u = 0; u < reach.size(); ++u) any = any || reach[u] != static_cast<int>(u);
  if (!any) return;
  std::vector<Unit> merged;
  for (int u = 0, n = static_cast<int>(result.units.size()); u < n;) {
    int end = u;
    Unit unit{result.units[static_cast<std::size_t>(u)].anchor, {}};
    for (int v = u; v <= end; ++v) {
      end = std::max(end, reach[static_cast<std::size_t>(v)]);
      const auto& ops = result.units[static_cast<std::size_t>(v)].ops;
      unit.ops.insert(unit.ops.end(), ops.begin(), ops.end());
      result.unit_of_anchor[static_cast<std::size_t>(result.units[static_cast<std::size_t>(v)].anchor)] =
          static_cast<int>(merged.size());
    }
    sort_by_position(unit.ops, position);
    unit.ops.erase(std::unique(unit.ops.begin(), unit.ops.end()), unit.ops.end());  // glue copied into several
    merged.push_back(std::move(unit));
    u = end + 1;
  }
  result.units = std::move(merged);
  result.tensors.clear();
  collect_crossing_tensors(graph, result);
}

}  // namespace

UnitGraph build_units(const ir::Graph& graph) {
  UnitGraph result;
  auto order = graph.topological_order();
  std::vector<int> position(graph.ops().size(), 0);
  result.unit_of_anchor.assign(graph.ops().size(), -1);
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto op = order[i];
    position[static_cast<std::size_t>(op)] = static_cast<int>(i);
    if (!is_batch_op(graph, graph.op(op))) continue;
    result.unit_of_anchor[static_cast<std::size_t>(op)] = static_cast<int>(result.units.size());
    result.units.push_back({op, {op}});
  }
  if (result.units.empty()) throw InputError("the model has no op that depends on the batch: nothing to partition");
  std::vector<int> stamp(graph.ops().size(), -1);
  GlueCollector glue{graph, result.unit_of_anchor, position, stamp};
  for (int unit = 0; unit < static_cast<int>(result.units.size()); ++unit) {
    auto& ops = result.units[static_cast<std::size_t>(unit)].ops;
    stamp[static_cast<std::size_t>(ops.front())] = unit;
    glue.collect(ops.front(), ops.front(), unit, ops);
  }
  attach_orphan_glue(stamp, result.unit_of_anchor, result);
  for (auto& unit : result.units) sort_by_position(unit.ops, position);
  collect_crossing_tensors(graph, result);
  merge_units_kept_together(graph, position, result);
  return result;
}

std::vector<UnitEdge> unit_edges(const ir::Graph& graph, const UnitGraph& units) {
  std::vector<UnitEdge> edges;
  for (const auto& tensor : units.tensors) {
    if (tensor.producer < 0) continue;
    double bytes = static_cast<double>(graph.value(tensor.value).type.bytes());
    for (int consumer : tensor.consumers) edges.push_back({tensor.producer, consumer, bytes});
  }
  return edges;
}

}  // namespace rannc::partition
