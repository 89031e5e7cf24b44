// Constant folding of the integer arithmetic an exported graph does on shapes.
//
// Exports with a dynamic batch compute Reshape targets at run time: Shape -> Gather -> Div ->
// Concat -> Reshape. ONNX 1.12's data propagation follows only some of those ops (not Div, for
// one), which leaves every value after such a Reshape without a shape. This pass evaluates the
// chains whose inputs are known (inferred shapes, constants) and replaces their nodes with
// Constant nodes, so that a new round of shape inference can see through them.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>
#include <unordered_map>

namespace rannc {

using OnnxTypeMap = std::unordered_map<std::string, onnx::TypeProto>;

// Returns true when it replaced at least one node.
bool fold_shape_arithmetic(onnx::GraphProto& graph, const OnnxTypeMap& types);

}  // namespace rannc
