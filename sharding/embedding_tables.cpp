#include "sharding/embedding_tables.h"

#include <algorithm>
#include <optional>
#include <map>
#include <set>
#include <variant>

namespace rannc::sharding {
namespace {

// aten::embedding_bag's mode argument.
std::string bag_mode_name(std::int64_t mode) { return mode == 1 ? "mean" : mode == 2 ? "max" : "sum"; }

// The model inputs `value` is computed from, through any ops (slices, reshapes, casts).
std::vector<std::string> source_inputs(const ir::Graph& graph, ir::ValueId value) {
  std::set<std::string> found;
  std::set<ir::ValueId> seen{value};
  std::vector<ir::ValueId> todo{value};
  while (!todo.empty()) {
    const auto& v = graph.value(todo.back());
    todo.pop_back();
    if (v.role == ir::ValueRole::kModelInput) found.insert(v.name);
    if (v.producer == ir::kNoId) continue;
    for (auto input : graph.op(v.producer).inputs)
      if (seen.insert(input).second) todo.push_back(input);
  }
  return {found.begin(), found.end()};
}

// A 2-D floating parameter: what a table is.
bool is_table(const ir::Value& v) {
  return v.role == ir::ValueRole::kParam && v.type.shape.size() == 2 && ir::is_floating_point(v.type.dtype);
}

double per_sample(const ir::Value& indices, std::int64_t batch) {
  return batch > 0 ? static_cast<double>(indices.type.numel()) / static_cast<double>(batch) : 0;
}

const std::string* literal_string(const ir::Op& op, const char* name) {
  auto it = op.attrs.find(name);
  return it == op.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
}

// Rows looked up one per id (aten::embedding, ONNX Gather) that flow into a sum or mean alone are
// pooled into bags by it (nn.Embedding(ids).sum(dim=1); ONNX: Gather, then ReduceSum).
std::string lookup_pooling(const ir::Graph& graph, const ir::Op& lookup) {
  const auto& out = graph.value(lookup.outputs.front());
  if (out.consumers.size() != 1) return "none";
  const auto& kind = graph.op(out.consumers.front()).kind;
  if (kind == "onnx::ReduceSum" || kind == "aten::sum") return "sum";
  if (kind == "onnx::ReduceMean" || kind == "aten::mean") return "mean";
  return "none";
}

EmbeddingTable table_in(const ir::Value& weight) {
  EmbeddingTable table;
  table.weight = weight.name;
  table.rows = weight.type.shape[0];
  table.dim = weight.type.shape[1];
  table.dtype = weight.type.dtype;
  return table;
}

// The table an op looks up, or nothing. `indices` is set to the looked-up ids.
std::optional<EmbeddingTable> table_of(const ir::Graph& graph, const ir::Op& op, ir::ValueId* indices) {
  if ((op.kind == "aten::embedding_bag" || op.kind == "aten::embedding") && op.inputs.size() >= 2) {
    if (!is_table(graph.value(op.inputs[0]))) return std::nullopt;
    auto table = table_in(graph.value(op.inputs[0]));
    *indices = op.inputs[1];
    table.pooling_mode = lookup_pooling(graph, op);
    if (op.kind == "aten::embedding_bag" && op.inputs.size() > 4) {
      const auto* mode = std::get_if<std::int64_t>(&graph.value(op.inputs[4]).literal);
      table.pooling_mode = bag_mode_name(mode ? *mode : 0);
    }
    return table;
  }
  if (op.kind == "onnx::Gather" && op.inputs.size() == 2 && is_table(graph.value(op.inputs[0]))) {
    auto axis = op.attrs.find("axis");
    if (axis != op.attrs.end() && std::get_if<std::int64_t>(&axis->second) && std::get<std::int64_t>(axis->second) != 0)
      return std::nullopt;
    auto table = table_in(graph.value(op.inputs[0]));
    *indices = op.inputs[1];
    table.pooling_mode = lookup_pooling(graph, op);
    return table;
  }
  if (op.kind == "onnx::Loop") {
    const std::string* mode = literal_string(op, "bag_mode");
    auto weight = std::find_if(op.inputs.begin(), op.inputs.end(), [&](ir::ValueId v) { return is_table(graph.value(v)); });
    if (!mode || weight == op.inputs.end()) return std::nullopt;
    auto table = table_in(graph.value(*weight));
    table.pooling_mode = *mode;
    // The bags' indices: the largest integer tensor the loop reads.
    *indices = ir::kNoId;
    for (auto v : op.inputs) {
      const auto& value = graph.value(v);
      if (!value.is_tensor() || ir::is_floating_point(value.type.dtype) || !value.batch_dependent) continue;
      if (*indices == ir::kNoId || value.type.numel() > graph.value(*indices).type.numel()) *indices = v;
    }
    return *indices == ir::kNoId ? std::nullopt : std::optional<EmbeddingTable>(table);
  }
  return std::nullopt;
}

// The lookup op, and the sum or mean that pools its rows when one follows (lookup_pooling).
void add_lookup(const ir::Graph& graph, const ir::Op& lookup, EmbeddingTable& table) {
  table.ops.push_back(lookup.id);
  ir::ValueId out = lookup.outputs.front();
  bool pooled_after = (lookup.kind == "aten::embedding" || lookup.kind == "onnx::Gather") && lookup_pooling(graph, lookup) != "none";
  if (pooled_after) {
    const auto& pool = graph.op(graph.value(out).consumers.front());
    table.ops.push_back(pool.id);
    out = pool.outputs.front();
  }
  table.pooled.push_back(out);
}

}  // namespace

std::vector<EmbeddingTable> find_embedding_tables(const ir::Graph& graph, std::int64_t batch) {
  std::vector<EmbeddingTable> tables;
  std::map<std::string, std::size_t> index;
  for (auto id : graph.topological_order()) {
    ir::ValueId indices = ir::kNoId;
    const auto& op = graph.op(id);
    auto table = table_of(graph, op, &indices);
    if (!table) continue;
    auto [it, fresh] = index.emplace(table->weight, tables.size());
    if (fresh) {
      table->indexed_by = source_inputs(graph, indices);
      table->pooling = per_sample(graph.value(indices), batch);
      tables.push_back(std::move(*table));
    }
    tables[it->second].indices.push_back(indices);
    add_lookup(graph, op, tables[it->second]);
  }
  return tables;
}

}  // namespace rannc::sharding
