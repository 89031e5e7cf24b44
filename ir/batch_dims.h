// Which values depend on the batch, and along which dim.
//
// Both frontends learn shapes by evaluating the model (TorchScript by running it, ONNX by shape
// inference) at the requested batch size. Evaluating it once more at another batch size and
// comparing tells exactly which dim of each tensor scales with the batch, with no guessing from
// op semantics; assign_batch_dims does that comparison for either frontend.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/graph.h"

namespace rannc::ir {

// Shapes by value id at twice the batch size; nullopt where the second evaluation gave none.
// An empty vector means the model could not be evaluated at another batch at all.
using ShapesAtDoubleBatch = std::vector<std::optional<std::vector<std::int64_t>>>;

// Sets Value::batch_dependent: model inputs, and every output of an op that reads a
// batch-dependent value (and every value it writes in place); likewise data_dependent.
void propagate_batch_dependence(Graph& graph);

// Propagates batch dependence, then sets TensorType::batch_dim of every tensor value: the dim
// whose size differs at twice the batch; where that shape is unknown, a batch-dependent tensor
// takes the first dim whose size equals `batch`. Values whose shape scales with the batch are
// marked batch-dependent too.
void assign_batch_dims(Graph& graph, std::int64_t batch, const ShapesAtDoubleBatch& at_double_batch);

// Rescales the batch dim of every tensor from `evaluated` samples to `batch`: a frontend
// evaluates the model at a few samples, where a forward at the requested batch would keep every
// intermediate alive at full size. A dim of k x evaluated becomes k x batch (flattened batch and
// sequence dims included). Throws InputError when a size would leave int64.
void scale_batch(Graph& graph, std::int64_t evaluated, std::int64_t batch);

}  // namespace rannc::ir
