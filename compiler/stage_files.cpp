#include "compiler/stage_files.h"

#include <filesystem>

#include "compiler/onnx_frontend.h"
#include "compiler/torch_plugin.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {

StageSource onnx_stage_source(const Model& model, const emit::StageLayout& stage) {
  const auto& proto = dynamic_cast<const OnnxModelSource&>(*model.source).proto();
  return onnx_stage_source(model.path, proto, model.graph, stage);
}

std::vector<std::string> write_stage_files(const Model& model, const std::vector<emit::StageLayout>& stages,
                                           const std::string& folder) {
  auto& plugin = torch_plugin();
  std::vector<std::string> hashes;
  for (const auto& stage : stages) {
    // The plugin writes atomically (a temporary beside the file, renamed over it).
    auto path = (std::filesystem::path(folder) / stage.file).string();
    if (model.format == ModelFormat::kTorchScript) {
      plugin.save_torchscript_stage(model, stage, path);
    } else {
      plugin.save_source_stage(onnx_stage_source(model, stage), path);
    }
    // Of the file as written: what every reader will check it against.
    hashes.push_back(sha256_of_file(path));
  }
  return hashes;
}

}  // namespace rannc
