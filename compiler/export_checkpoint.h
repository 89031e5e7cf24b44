// `rannc-partition export CKPT [-o FILE] [--module FILE]`: a checkpoint of rannc-run back to
// PyTorch. The stages' weights and buffers merge into one state_dict keyed by the model's own
// names (a weight tied between stages once) that `model.load_state_dict(torch.load(FILE))`
// accepts; for a TorchScript model, optionally the model itself with the trained weights.
#pragma once

#include <string>

namespace rannc {

struct ExportOptions {
  std::string checkpoint;    // a checkpoint folder, or a --save folder (its latest)
  std::string output = "state_dict.pt";
  std::string module_output;  // empty: none; else the TorchScript model with the trained weights
  std::string model_path;     // the model, when it is no longer at the plan's path
};

// Returns the summary line printed; InputError on a checkpoint that is not whole, a model that
// is not the one trained, or --module for an ONNX model.
std::string run_export(const ExportOptions& options);

}  // namespace rannc
