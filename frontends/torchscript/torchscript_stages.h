// Stage modules in libtorch (part of the torch plugin; includes torch headers).
#pragma once

#include <torch/script.h>

#include "compiler/model.h"
#include "frontends/onnx/onnx_stage_source.h"
#include "emit/stage_layout.h"

namespace rannc {

// A TorchScript model's stage: the stage's nodes of the lowered forward cloned into a new
// graph whose weight reads become attributes named by stage_name, registered as forward.
torch::jit::Module torchscript_stage_module(const Model& model, const emit::StageLayout& stage);

// A stage from generated source: the attributes registered, then forward defined.
torch::jit::Module source_stage_module(const StageSource& stage, const std::string& class_name);

}  // namespace rannc
