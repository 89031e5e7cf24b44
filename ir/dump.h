// Readable and machine dumps of a graph, for debugging frontends and passes.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ir/graph.h"

namespace rannc::ir {

// "float32[*4,64]": dtype and shape, the batch dim starred; "?" for unknown dims or rank.
std::string type_to_string(const TensorType& type);

std::string literal_to_string(const Literal& literal);

// One line per op in topological order: "%y = aten::linear(%x, %w, %b) : float32[*4,64]",
// followed by "  # layers.0.linear1" when the op's module is known.
std::string graph_to_text(const Graph& graph);

// {"values": [...], "ops": [...], "outputs": [...]} with every field of the IR; an op's "module"
// only when it is known.
nlohmann::json graph_to_json(const Graph& graph);

}  // namespace rannc::ir
