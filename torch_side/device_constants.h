// Stage files and models are saved on the CPU, and a traced factory call (arange, zeros, full)
// keeps `device=cpu` as a constant of its graph: loading the module onto a GPU (map_location)
// moves its tensors, not such constants. This moves them to the device the module runs on, so the
// same stage file runs on either.
#pragma once

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>

namespace rannc {

inline void retarget_device_constants(torch::jit::Block* block, const c10::Device& device) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) retarget_device_constants(inner, device);
    if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) continue;
    if (node->output()->type()->kind() != c10::TypeKind::DeviceObjType) continue;
    auto value = torch::jit::toIValue(node->output());
    if (!value || !value->isDevice() || !value->toDevice().is_cpu()) continue;
    torch::jit::WithInsertPoint here(node);
    node->output()->replaceAllUsesWith(block->owningGraph()->insertConstant(c10::IValue(device)));
  }
}

// Every method of `module` (nothing when `device` is the CPU).
inline void retarget_device_constants(torch::jit::Module& module, const c10::Device& device) {
  if (device.is_cpu()) return;
  for (const auto& method : module.get_methods()) retarget_device_constants(method.graph()->block(), device);
}

}  // namespace rannc
