// The parts of the compiler that need libtorch live in a plugin, librannc_torch.so, that is
// loaded on first use. Loading libtorch costs about 0.5 s and 160 MB before any work, so
// commands that never touch a TorchScript model (planning a shape-only ONNX model, showing a
// plan) stay fast and small. Only the plugin's sources include torch headers.
#pragma once

#include <string>

#include "compiler/model.h"

namespace rannc {

class TorchPlugin {
 public:
  virtual ~TorchPlugin() = default;

  // The TorchScript frontend: load, inline, lower attribute reads to named parameters and
  // buffers, remove mutation, record shapes by running the graph on the example inputs.
  virtual Model load_torchscript(const std::string& path, const LoadOptions& options) = 0;
};

// Loads the plugin once: from $RANNC_TORCH_PLUGIN, else from the executable's folder or
// ../lib/rannc beside it. Throws Error when it cannot be found or loaded.
TorchPlugin& torch_plugin();

}  // namespace rannc

// The plugin's one exported symbol; returns a process-lifetime instance.
extern "C" __attribute__((visibility("default"))) rannc::TorchPlugin* rannc_torch_plugin_instance();
