#include "partitioner/units.h"

#include <algorithm>

#include "support/error.h"

namespace rannc::partition {
namespace {

bool is_batch_op(const ir::Graph& graph, const ir::Op& op) {
  return std::any_of(op.outputs.begin(), op.outputs.end(), [&](ir::ValueId id) {
    const auto& value = graph.value(id);
    return value.is_tensor() && value.batch_dependent;
  });
}

// The glue a unit needs: producers of its inputs that are not batch ops, transitively.
void collect_glue(const ir::Graph& graph, const std::vector<int>& unit_of_anchor, ir::OpId op,
                  std::vector<int>& stamp, int unit, std::vector<ir::OpId>& out) {
  for (auto input : graph.op(op).inputs) {
    ir::OpId producer = graph.value(input).producer;
    if (producer == ir::kNoId || unit_of_anchor[static_cast<std::size_t>(producer)] >= 0) continue;
    if (stamp[static_cast<std::size_t>(producer)] == unit) continue;
    stamp[static_cast<std::size_t>(producer)] = unit;
    out.push_back(producer);
    collect_glue(graph, unit_of_anchor, producer, stamp, unit, out);
  }
}

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
  for (int unit = 0; unit < static_cast<int>(result.units.size()); ++unit) {
    auto& ops = result.units[static_cast<std::size_t>(unit)].ops;
    stamp[static_cast<std::size_t>(ops.front())] = unit;
    collect_glue(graph, result.unit_of_anchor, ops.front(), stamp, unit, ops);
  }
  attach_orphan_glue(stamp, result.unit_of_anchor, result);
  for (auto& unit : result.units) sort_by_position(unit.ops, position);
  collect_crossing_tensors(graph, result);
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
