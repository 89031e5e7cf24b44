// Stage modules in libtorch (part of the torch plugin; includes torch headers).
#pragma once

#include <torch/script.h>

#include "compiler/model.h"
#include "frontends/onnx/onnx_stage_source.h"
#include "emit/stage_layout.h"

namespace rannc {

// A TorchScript model's stage: the stage's nodes of the lowered forward cloned into a new
// graph whose weight reads become attributes named by stage_name, registered as forward. With
// `tensor_rank` >= 0, a stage of tensor-parallel degree > 1 is cut for that rank
// (tensor_rank_cut.h); -1: the whole stage.
torch::jit::Module torchscript_stage_module(const Model& model, const emit::StageLayout& stage, int tensor_rank = -1);

// A stage from generated source: the attributes registered, then forward defined (torch.ops.rannc.*
// resolved: a tensor rank's stage calls the group's collectives).
torch::jit::Module source_stage_module(const StageSource& stage, const std::string& class_name);

}  // namespace rannc
