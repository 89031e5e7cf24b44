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

// Shape inference of a model newer than the linked ONNX library (onnx_opsets.h): the model in
// opset-17 forms, which every library this builds against infers. A node of a newer form
// becomes an opset-17 node that infers the same types, or is removed, its outputs typed (as
// value_info) by rules of our own from `types`, the previous round's, where its inputs' types
// and constants are known; a later round types what an earlier one could not.
struct LoweredModel {
  onnx::ModelProto model;
  std::size_t typed = 0;  // outputs of removed nodes that have a type
  bool complete = true;   // whether all of them have one
};
LoweredModel lower_for_library(const onnx::ModelProto& model, const OnnxTypeMap& types);

}  // namespace rannc
