#include "partitioner/context_parallel.h"

#include <algorithm>

#include "ir/op_kinds.h"

namespace rannc::partition {
namespace {

using ir::Graph;
using ir::OpId;
using ir::ValueId;

// Whether an op reads the samples' data (not only their shapes: the positions and masks a model
// makes from the sequence's length are made again for each device's positions).
bool reads_samples(const Graph& graph, const ir::Op& op) {
  return std::any_of(op.inputs.begin(), op.inputs.end(), [&](ValueId id) {
    const auto& value = graph.value(id);
    return value.is_tensor() && value.data_dependent;
  });
}

// The keys and values of one attention core, as its ring passes them: each the tensor its data
// movement starts from (grouped-query attention's heads before their repeat).
ExchangedValues exchanged_by(const Graph& graph, const std::vector<OpId>& core) {
  ExchangedValues result;
  result.core_op = core.front();
  for (ValueId operand : key_value_operands(graph, core)) result.values.push_back(movement_before(graph, operand).source);
  return result;
}

std::string describe(const Graph& graph, OpId id) { return graph.op(id).kind + " (op " + std::to_string(id) + ")"; }

// Whether a data-movement op keeps each position apart: every tensor of the samples' data it reads
// is [batch, sequence, ...] as its output is, or its output joins the batch and sequence into
// one leading dim (the logits flattened for a loss). A slice, gather or transpose of the sequence
// (a classifier's first token) does not.
bool keeps_positions(const Graph& graph, const ir::Op& op) {
  if (op.outputs.empty()) return false;
  const auto& out = graph.value(op.outputs.front()).type.shape;
  for (ValueId id : op.inputs) {
    const auto& value = graph.value(id);
    if (!value.is_tensor() || !value.data_dependent) continue;
    const auto& in = value.type.shape;
    if (in.size() < 2 || out.empty()) return false;
    const bool kept = out.size() >= 2 && out[0] == in[0] && out[1] == in[1];
    const bool joined = out.size() + 1 == in.size() && out[0] == in[0] * in[1];
    if (!kept && !joined) return false;
  }
  return true;
}

// Why an op outside the layer regions may mix positions of the sequence; empty when it does not.
std::string mixes_positions(const Graph& graph, const ir::Op& op, const TensorRegions& regions) {
  if (regions.region_of_op[static_cast<std::size_t>(op.id)] >= 0 || !reads_samples(graph, op)) return {};
  if (std::binary_search(regions.sequence_ops.begin(), regions.sequence_ops.end(), op.id)) return {};
  switch (ir::op_class_of(op.kind)) {
    case ir::OpClass::kElementwise:
    case ir::OpClass::kEmbedding:
    case ir::OpClass::kGlue:
      return {};
    case ir::OpClass::kDataMovement:
      if (keeps_positions(graph, op)) return {};
      return describe(graph, op.id) + " moves data across positions of the sequence";
    default:
      return describe(graph, op.id) + " works across positions outside the attention layers";
  }
}

}  // namespace

ContextSplit find_context_split(const ir::Graph& graph, const TensorRegions& regions) {
  ContextSplit result;
  for (const auto& region : regions.regions)
    if (!region.is_vocabulary() && !region.attention_core.empty())
      result.exchanged.push_back(exchanged_by(graph, region.attention_core));
  if (result.exchanged.empty()) {
    result.reason = "it has no attention layer that tensor parallelism splits by heads";
    return result;
  }
  for (const auto& op : graph.ops()) {
    result.reason = mixes_positions(graph, op, regions);
    if (!result.reason.empty()) {
      result.exchanged.clear();
      return result;
    }
  }
  for (const auto& exchanged : result.exchanged) {
    if (exchanged.values.size() == 2) continue;
    result.reason = "the keys and values of the attention core at " + describe(graph, exchanged.core_op) + " are not found";
    result.exchanged.clear();
    return result;
  }
  std::sort(result.exchanged.begin(), result.exchanged.end(),
            [](const ExchangedValues& a, const ExchangedValues& b) { return a.core_op < b.core_op; });
  result.allowed = true;
  return result;
}

}  // namespace rannc::partition
