// rannc-partition export's libtorch part (part of the torch plugin; includes torch headers).
#pragma once

#include <optional>

#include <torch/script.h>

#include "compiler/torch_plugin.h"

namespace rannc {

struct ExportedCheckpoint {
  TorchPlugin::ExportResult result;
  std::optional<torch::jit::Module> model;  // the TorchScript model with the trained values, when asked for
};

// Writes request.output (see TorchPlugin::ExportRequest); the caller saves `model`.
ExportedCheckpoint export_checkpoint(const TorchPlugin::ExportRequest& request);

}  // namespace rannc
