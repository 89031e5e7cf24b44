// What the TorchScript frontend keeps of a model for the phases that rebuild parts of it
// (profiling ops, writing stage files). Includes torch headers: only plugin sources include it.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/model.h"

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
};

}  // namespace rannc
