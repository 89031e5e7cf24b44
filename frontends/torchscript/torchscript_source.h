// What the TorchScript frontend keeps of a model for the phases that rebuild parts of it
// (profiling ops, writing stage files). Includes torch headers: only plugin sources include it.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "torch_side/torch_dtype.h"
#include "torch_side/torch_error.h"

namespace rannc {

class TorchScriptSource : public ModelSource {
 public:
  torch::jit::Module module;
  // forward after inlining and lowering: its inputs are the model inputs followed by one input
  // per distinct weight tensor; it has no module attribute reads left.
  std::shared_ptr<torch::jit::Graph> graph;
  // ir::Op::source_node indexes this vector.
  std::vector<torch::jit::Node*> nodes;
  // The weight behind each graph input past the model inputs, with its qualified name.
  struct Weight {
    std::string name;
    at::Tensor tensor;
    bool trainable = false;
  };
  std::vector<Weight> weights;
  // The example inputs' specs, in the order of the graph's model inputs.
  std::vector<InputSpec> specs;
};


// Example tensors for the model inputs: floats random with a fixed seed, integers zero (every
// lookup accepts index 0). `scale` multiplies the batch dim. `path` names the model in errors.
std::vector<at::Tensor> example_inputs(const std::string& path, const std::vector<InputSpec>& specs, std::int64_t scale);

// Runs the lowered graph on the inputs and weights and returns every node output, in node
// order (the order of TorchScriptSource::nodes).
std::vector<c10::IValue> record_values(torch::jit::Graph& lowered, const std::vector<at::Tensor>& inputs,
                                       const std::vector<TorchScriptSource::Weight>& weights);

}  // namespace rannc
