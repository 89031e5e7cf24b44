// The model in float64, for verify and partition's check (part of the torch plugin): the stages
// are compared with the model in float32, which can itself be wrong (libtorch 1.13's CPU
// gelu_backward on a non-contiguous gradient, see torch_kernel_fixes.h; or an op whose float32
// result is ill-conditioned). The model in float64 tells: the whole model as one module with its
// float32 weights, tensor constants and dtype arguments in float64, and, when float32 departs
// from it, the op where they part.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>

#include "compiler/torch_plugin.h"

namespace rannc {

// Why the model does not run in float64 for this request (no float32 output to compare);
// nullopt when it may. The caller decides on size (VerifyRequest::float64_off).
std::optional<std::string> float64_unavailable(const TorchPlugin::VerifyRequest& request);

// The whole model as one module computing in float64, and its weights' names in the plan by
// attribute name.
struct Float64Model {
  torch::jit::Module module;
  std::map<std::string, std::string> weight_names;
};
Float64Model float64_model(const TorchPlugin::VerifyRequest& request);

// A float32 tensor as float64 (strides kept); any other as it is.
at::Tensor float32_as_float64(const at::Tensor& tensor);

// The first op, in graph order, that departs from float64 beyond the request's tolerance when it
// runs alone in float32 on the float64 values of the model rounded to float32: its output, or
// its input gradients from the float64 output gradients. `inputs` are one chunk of the model
// inputs, `seeds` the gradients of the model outputs (model.graph.model_outputs() order;
// undefined where none). Sets check.departure, or check.not_located (and check.builds_up when
// every op was tried).
void locate_departure(const TorchPlugin::VerifyRequest& request, const std::vector<at::Tensor>& inputs,
                      const std::vector<at::Tensor>& seeds, TorchPlugin::Float64Check& check);

}  // namespace rannc
