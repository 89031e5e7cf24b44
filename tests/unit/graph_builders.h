// Small hand-built graphs for unit tests.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace rannc::testing {

inline ir::ValueId add_tensor(ir::Graph& graph, const std::string& name, std::vector<std::int64_t> shape,
                              ir::ValueRole role = ir::ValueRole::kIntermediate,
                              ir::DType dtype = ir::DType::kFloat32) {
  ir::Value value;
  value.name = name;
  value.role = role;
  value.type.shape = std::move(shape);
  value.type.dtype = dtype;
  return graph.add_value(std::move(value));
}

inline ir::ValueId add_literal(ir::Graph& graph, const std::string& name, ir::Literal literal, ir::ValueKind kind) {
  ir::Value value;
  value.name = name;
  value.kind = kind;
  value.literal = std::move(literal);
  return graph.add_value(std::move(value));
}

}  // namespace rannc::testing
