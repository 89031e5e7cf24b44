#include "compiler/stage_files.h"

#include <filesystem>

#include "compiler/torch_plugin.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {

std::vector<std::string> write_stage_files(const Model& model, const std::vector<emit::StageLayout>& stages,
                                           const std::string& folder) {
  std::vector<std::string> hashes;
  for (const auto& stage : stages) {
    // The plugin writes atomically (a temporary beside the file, renamed over it).
    auto path = (std::filesystem::path(folder) / stage.file).string();
    // The source first: a model whose weights cannot be read is refused before libtorch loads.
    auto source = model.source->stage_source(model, stage);
    auto& plugin = torch_plugin();
    if (source) {
      plugin.save_source_stage(*source, path);
    } else {
      plugin.save_torchscript_stage(model, stage, path);
    }
    // Of the file as written: what every reader will check it against.
    hashes.push_back(sha256_of_file(path));
  }
  return hashes;
}

}  // namespace rannc
