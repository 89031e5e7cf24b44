// Constant folding of the integer arithmetic an exported graph does on shapes.
//
// Exports with a dynamic batch compute Reshape targets at run time: Shape -> Gather -> Div ->
// Concat -> Reshape. ONNX 1.12's data propagation follows only some of those ops (not Div, for
// one), which leaves every value after such a Reshape without a shape. This pass evaluates the
// chains whose inputs are known (inferred shapes, constants) and replaces their nodes with
// Constant nodes, so that a new round of shape inference can see through them.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace rannc {

using OnnxTypeMap = std::unordered_map<std::string, onnx::TypeProto>;

// The values of an int64 or int32 tensor stored inline with at most `max_elements` elements;
// nullopt for anything else (other types, external data, bad or large dims).
std::optional<std::vector<std::int64_t>> small_int_values(const onnx::TensorProto& tensor, std::size_t max_elements);

// Returns true when it replaced at least one node.
bool fold_shape_arithmetic(onnx::GraphProto& graph, const OnnxTypeMap& types);

}  // namespace rannc
