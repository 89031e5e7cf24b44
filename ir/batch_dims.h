// Which values depend on the batch, and along which dim.
//
// Both frontends learn shapes by evaluating the model (TorchScript by running it, ONNX by shape
// inference) at the requested batch size. Evaluating it once more at another batch size and
// comparing tells exactly which dim of each tensor scales with the batch, with no guessing from
// op semantics; assign_batch_dims does that comparison for either frontend.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace rannc::ir {

// Sets Value::batch_dependent: model inputs, and every output of an op that reads a
// batch-dependent value.
void propagate_batch_dependence(Graph& graph);

// Sets TensorType::batch_dim for every tensor value. `other_shapes[v]` is the shape of value v at
// `other_batch`, or empty with `other_known[v] == false` when the second evaluation could not
// provide it; then a batch-dependent tensor takes the first dim whose size equals `batch`.
// Also marks values whose shape scales with the batch as batch-dependent.
void assign_batch_dims(Graph& graph, std::int64_t batch, const std::vector<std::vector<std::int64_t>>& other_shapes,
                       const std::vector<bool>& other_known);

}  // namespace rannc::ir
