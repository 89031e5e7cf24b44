// ONNX stages as TorchScript: each ONNX op of a stage is mapped to aten calls in generated
// TorchScript source, which the torch plugin compiles with Module::define after registering the
// attributes below. There is no ONNX-to-TorchScript converter in Debian; this is ours. Pure C++.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/stage_source.h"
#include "emit/stage_layout.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace onnx {
class ModelProto;
}

namespace rannc {

// With `tensor_rank` >= 0, a stage of tensor-parallel degree > 1 as that rank runs it
// (compiler/source_rank_cut.h). Throws InputError naming the model and the first ONNX op type
// (with its node name) that has no mapping, or that a tensor rank's cut does not know, or a weight
// whose data is not available (external data that was not loaded).
StageSource onnx_stage_source(const std::string& model_path, const onnx::ModelProto& model, const ir::Graph& graph,
                              const emit::StageLayout& stage, int tensor_rank = -1);

}  // namespace rannc
