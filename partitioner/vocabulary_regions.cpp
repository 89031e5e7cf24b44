// The vocabulary regions of a language model (tensor_regions.h): Megatron-LM's
// VocabParallelEmbedding and its output layer with the parallel cross entropy.
#include <algorithm>
#include <optional>
#include <string>

#include "ir/op_kinds.h"
#include "partitioner/tensor_regions.h"
#include "partitioner/weight_product.h"

namespace rannc::partition {
namespace {

using ir::Graph;
using ir::kNoId;
using ir::Op;
using ir::OpId;
using ir::ValueId;

bool is_lookup(const Op& op) {
  std::string_view kind = ir::functional_kind(op.kind);
  if (kind == "aten::embedding") return true;
  if (kind != "onnx::Gather") return false;
  auto axis = op.attrs.find("axis");
  const auto* value = axis == op.attrs.end() ? nullptr : std::get_if<std::int64_t>(&axis->second);
  return axis == op.attrs.end() || (value && *value == 0);
}

// A token embedding: a lookup in a trainable table at least as tall as it is wide (a vocabulary,
// not a position table) by integer ids that come with the batch, its rows not pooled (a bag's sum
// or mean: a recommendation model's table, which the sharding planner places). Each device of
// the group looks up the ids in its rows, the others give zeros, and the group all-reduces the
// rows (a reduce-scatter along the sequence with sequence parallelism).
std::optional<TensorRegion> token_embedding(const Graph& graph, const Op& op) {
  if (!is_lookup(op) || op.inputs.size() < 2 || op.outputs.size() != 1) return std::nullopt;
  ValueId table = op.inputs[0];
  const auto& ids = graph.value(op.inputs[1]);
  if (!is_matrix_param(graph, table) || !ids.is_tensor() || !ids.batch_dependent ||
      ir::is_floating_point(ids.type.dtype))
    return std::nullopt;
  const auto& shape = graph.value(table).type.shape;
  const auto& rows = graph.value(op.outputs[0]);
  if (shape[0] < shape[1] || rows.model_output) return std::nullopt;
  for (OpId consumer : rows.consumers) {
    auto op_class = ir::op_class_of(graph.op(consumer).kind);
    if (op_class == ir::OpClass::kReduction || op_class == ir::OpClass::kPool) return std::nullopt;
  }
  TensorRegion region;
  region.kind = plan::RegionKind::kVocabularyEmbedding;
  region.column_ops = {op.id};
  region.row_op = op.id;
  region.ops = {op.id};
  region.weights = {{table, 0, 1}};
  region.output = op.outputs[0];
  region.divisor = shape[0];
  return region;
}

// A bias added to a product's output by an op of its own (an exported linear's Add): the 1-D
// parameter of `features` elements, else kNoId.
ValueId added_bias(const Graph& graph, const Op& op, ValueId product_output, std::int64_t features) {
  std::string_view kind = ir::functional_kind(op.kind);
  if (kind != "aten::add" && kind != "onnx::Add") return kNoId;
  for (std::size_t i = 0; i < 2 && i < op.inputs.size(); ++i) {
    const auto& value = graph.value(op.inputs[i]);
    if (op.inputs[i] != product_output && value.role == ir::ValueRole::kParam &&
        value.type.shape == std::vector<std::int64_t>{features})
      return op.inputs[i];
  }
  return kNoId;
}

// The output layer: a product whose output (after a bias add of its own) is the model's first
// output and read by nothing else, the logits of the runtime's cross entropy, with its features
// along their last dim. Split by vocabulary when it is wider than its input; a classifier
// narrower than its input stays whole and `why_whole` says so.
std::optional<TensorRegion> output_layer(const Graph& graph, OpId id, std::string& why_whole) {
  const Op& op = graph.op(id);
  auto product = weight_product(graph, op);
  if (!product || graph.model_outputs().empty() || op.outputs.size() != 1) return std::nullopt;
  const auto& shape = graph.value(product->weight).type.shape;
  std::int64_t features = shape[static_cast<std::size_t>(product->out_features_dim)];
  std::int64_t inputs = shape[static_cast<std::size_t>(product->in_features_dim)];
  TensorRegion region;
  region.kind = plan::RegionKind::kVocabularyHead;
  region.column_ops = {id};
  region.ops = {id};
  region.weights = {{product->weight, product->out_features_dim, 1}};
  if (product->transpose != kNoId) region.ops.push_back(product->transpose);
  if (product->bias != kNoId) region.weights.push_back({product->bias, 0, 1});
  ValueId logits = op.outputs[0];
  if (graph.value(logits).consumers.size() == 1) {
    const Op& add = graph.op(graph.value(logits).consumers[0]);
    ValueId bias = added_bias(graph, add, logits, features);
    if (bias != kNoId) {
      region.ops.push_back(add.id);
      region.weights.push_back({bias, 0, 1});
      logits = add.outputs.at(0);
    }
  }
  const auto& value = graph.value(logits);
  if (logits != graph.model_outputs().front() || !value.consumers.empty() || value.type.shape.empty() ||
      value.type.shape.back() != features)
    return std::nullopt;
  if (features < inputs) {
    why_whole = "a classifier of " + std::to_string(features) + " classes, narrower than its " + std::to_string(inputs) +
                " input features, stays whole (only an output layer wider than its input, a vocabulary, splits)";
    return std::nullopt;
  }
  std::sort(region.ops.begin(), region.ops.end());
  std::sort(region.weights.begin(), region.weights.end(),
            [](const SplitWeight& a, const SplitWeight& b) { return a.weight < b.weight; });
  region.input = product->activation;
  region.output = logits;
  region.divisor = features;
  // The product's output and the logits split along the vocabulary, their last dim.
  for (ValueId split : {op.outputs[0], logits})
    region.split_values.emplace_back(split, static_cast<int>(value.type.shape.size()) - 1);
  std::sort(region.split_values.begin(), region.split_values.end());
  region.split_values.erase(std::unique(region.split_values.begin(), region.split_values.end()),
                            region.split_values.end());
  return region;
}

bool unclaimed(const TensorRegions& regions, const TensorRegion& region) {
  return std::all_of(region.ops.begin(), region.ops.end(),
                     [&](OpId id) { return regions.region_of_op[static_cast<std::size_t>(id)] < 0; });
}

}  // namespace

void add_vocabulary_regions(const Graph& graph, TensorRegions& regions) {
  for (const auto& op : graph.ops()) {
    auto embedding = token_embedding(graph, op);
    if (embedding && unclaimed(regions, *embedding)) regions.add(std::move(*embedding));
  }
  // The output layer is a column candidate whose split reached the model output.
  std::vector<RejectedRegion> still_rejected;
  for (auto& rejected : regions.rejected) {
    if (rejected.column_ops.size() == 1) {
      std::string why_whole;
      auto head = output_layer(graph, rejected.column_ops[0], why_whole);
      if (head && unclaimed(regions, *head)) {
        regions.add(std::move(*head));
        continue;
      }
      if (!why_whole.empty()) rejected.reason = why_whole;
    }
    still_rejected.push_back(std::move(rejected));
  }
  regions.rejected = std::move(still_rejected);
}

}  // namespace rannc::partition
