#include "compiler/stage_files.h"

#include <filesystem>

#include "compiler/onnx_frontend.h"
#include "compiler/torch_plugin.h"
#include "support/error.h"

namespace rannc {

emit::StageSource onnx_stage_source(const Model& model, const emit::StageLayout& stage) {
  const auto& proto = dynamic_cast<const OnnxModelSource&>(*model.source).proto();
  return emit::onnx_stage_source(model.path, proto, model.graph, stage);
}

void write_stage_files(const Model& model, const std::vector<emit::StageLayout>& stages, const std::string& folder) {
  auto& plugin = torch_plugin();
  for (const auto& stage : stages) {
    auto path = std::filesystem::path(folder) / stage.file;
    auto temporary = path.string() + ".tmp";
    std::error_code error;
    try {
      if (model.format == ModelFormat::kTorchScript) {
        plugin.save_torchscript_stage(model, stage, temporary);
      } else {
        plugin.save_source_stage(onnx_stage_source(model, stage), temporary);
      }
      std::filesystem::rename(temporary, path, error);
      if (error) throw InputError(path.string() + ": cannot write the stage file: " + error.message());
    } catch (...) {
      std::filesystem::remove(temporary, error);
      throw;
    }
  }
}

}  // namespace rannc
