#include "ir/graph.h"

#include <queue>
#include <string>

#include "support/error.h"

namespace rannc::ir {

std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (auto dim : shape) {
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count)) return std::nullopt;
  }
  return count;
}

bool TensorType::shape_known() const {
  if (!rank_known) return false;
  for (auto dim : shape) {
    if (dim < 0) return false;
  }
  return true;
}

std::int64_t TensorType::numel() const {
  if (!rank_known) return 0;
  return checked_numel(shape).value_or(0);
}

std::int64_t TensorType::bytes() const {
  std::int64_t bytes = 0;
  return __builtin_mul_overflow(numel(), std::int64_t{dtype_size(dtype)}, &bytes) ? 0 : bytes;
}

ValueId Graph::add_value(Value value) {
  value.id = static_cast<ValueId>(values_.size());
  values_.push_back(std::move(value));
  return values_.back().id;
}

OpId Graph::add_op(std::string kind, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
                   std::int64_t source_node) {
  Op op;
  op.id = static_cast<OpId>(ops_.size());
  op.kind = std::move(kind);
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  op.source_node = source_node;
  for (auto ids : {&op.inputs, &op.outputs}) {
    for (auto id : *ids) {
      if (id < 0 || static_cast<std::size_t>(id) >= values_.size()) {
        throw InputError("op " + op.kind + " refers to value " + std::to_string(id) + ", which does not exist");
      }
    }
  }
  for (auto input : op.inputs) value(input).consumers.push_back(op.id);
  for (auto output : op.outputs) {
    if (value(output).producer != kNoId) {
      throw InputError("value '" + value(output).name + "' has two producers (" +
                       ops_[static_cast<std::size_t>(value(output).producer)].kind + " and " + op.kind + ")");
    }
    value(output).producer = op.id;
  }
  ops_.push_back(std::move(op));
  return ops_.back().id;
}

void Graph::add_model_output(ValueId id) {
  value(id).model_output = true;
  model_outputs_.push_back(id);
}

void Graph::add_write(OpId op_id, ValueId id) {
  op(op_id).writes.push_back(id);
  value(id).writers.push_back(op_id);
}

std::vector<ValueId> Graph::values_with_role(ValueRole role) const {
  std::vector<ValueId> ids;
  for (const auto& v : values_) {
    if (v.role == role) ids.push_back(v.id);
  }
  return ids;
}

void Graph::set_module_path(OpId op_id, std::string_view path) {
  auto& op = this->op(op_id);
  if (path.empty()) {
    op.module = kNoId;
    return;
  }
  auto [it, added] = module_ids_.emplace(std::string(path), static_cast<std::int32_t>(module_paths_.size()));
  if (added) module_paths_.push_back(it->first);
  op.module = it->second;
}

const std::string& Graph::module_path(OpId op_id) const {
  static const std::string kNone;
  auto module = op(op_id).module;
  return module == kNoId ? kNone : module_paths_.at(static_cast<std::size_t>(module));
}

std::vector<OpId> Graph::topological_order() const {
  // Kahn's algorithm with a min-heap on op id: among ready ops the earliest inserted goes first,
  // which keeps the frontend's order whenever it already is topological.
  std::vector<int> pending(ops_.size(), 0);
  for (const auto& op : ops_) {
    for (auto input : op.inputs) {
      if (value(input).producer != kNoId) ++pending[static_cast<std::size_t>(op.id)];
    }
  }
  std::priority_queue<OpId, std::vector<OpId>, std::greater<>> ready;
  for (const auto& op : ops_) {
    if (pending[static_cast<std::size_t>(op.id)] == 0) ready.push(op.id);
  }
  std::vector<OpId> order;
  order.reserve(ops_.size());
  while (!ready.empty()) {
    OpId id = ready.top();
    ready.pop();
    order.push_back(id);
    for (auto output : op(id).outputs) {
      for (auto consumer : value(output).consumers) {
        if (--pending[static_cast<std::size_t>(consumer)] == 0) ready.push(consumer);
      }
    }
  }
  if (order.size() != ops_.size()) throw InputError("the model graph has a cycle");
  return order;
}

void Graph::validate() const {
  for (const auto& op : ops_) {
    for (auto id : op.outputs) {
      if (value(id).producer != op.id) {
        throw InputError("value '" + value(id).name + "' does not name op " + std::to_string(op.id) +
                         " (" + op.kind + ") as its producer");
      }
    }
  }
  for (const auto& v : values_) {
    if (v.role != ValueRole::kIntermediate && v.producer != kNoId) {
      throw InputError("value '" + v.name + "' is a model input or weight but is produced by an op");
    }
  }
  topological_order();
}

std::string_view value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kBool: return "bool";
    case ValueKind::kIntList: return "int[]";
    case ValueKind::kFloatList: return "float[]";
    case ValueKind::kString: return "str";
    case ValueKind::kNone: return "none";
    case ValueKind::kOther: return "other";
  }
  return "other";
}

std::string_view value_role_name(ValueRole role) {
  switch (role) {
    case ValueRole::kIntermediate: return "intermediate";
    case ValueRole::kModelInput: return "input";
    case ValueRole::kParam: return "param";
    case ValueRole::kBuffer: return "buffer";
  }
  return "intermediate";
}

std::vector<OpId> Graph::ops_computing(const std::vector<ValueId>& values, const std::set<ValueId>& stop) const {
  std::set<ValueId> seen = stop;
  std::set<OpId> ops;
  std::vector<ValueId> todo = values;
  while (!todo.empty()) {
    auto id = todo.back();
    todo.pop_back();
    if (!seen.insert(id).second) continue;
    std::vector<OpId> needed = value(id).writers;
    if (value(id).producer != kNoId) needed.push_back(value(id).producer);
    for (auto op_id : needed)
      if (ops.insert(op_id).second)
        for (auto input : op(op_id).inputs) todo.push_back(input);
  }
  return {ops.begin(), ops.end()};
}

}  // namespace rannc::ir
