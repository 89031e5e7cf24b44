#include "compiler/stage_files.h"

#include <filesystem>

#include "compiler/torch_plugin.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {
namespace {

// One stage file, whole (`tensor_rank` -1) or as a tensor rank runs it: generated source compiled,
// or a TorchScript model's nodes cloned. The plugin writes atomically (a temporary beside the
// file, renamed over it).
void write_stage_file(const Model& model, const emit::StageLayout& stage, const std::string& path, int tensor_rank) {
  // The source first: a model whose weights cannot be read is refused before libtorch loads.
  auto source = model.source->stage_source(model, stage, tensor_rank);
  if (source) {
    torch_plugin().save_source_stage(*source, path);
  } else {
    torch_plugin().save_torchscript_stage(model, stage, path, tensor_rank);
  }
}

}  // namespace

std::vector<StageHashes> write_stage_files(const Model& model, const std::vector<emit::StageLayout>& stages,
                                           const std::string& folder) {
  std::vector<StageHashes> hashes;
  auto path_of = [&](const std::string& file) { return (std::filesystem::path(folder) / file).string(); };
  for (const auto& stage : stages) {
    write_stage_file(model, stage, path_of(stage.file), -1);
    // Of the file as written: what every reader will check it against.
    StageHashes written{sha256_of_file(path_of(stage.file)), {}};
    const auto& rank_files = stage.tensor_shard.files;
    for (std::size_t rank = 0; rank < rank_files.size(); ++rank) {
      write_stage_file(model, stage, path_of(rank_files[rank]), static_cast<int>(rank));
      written.tensor_ranks.push_back(sha256_of_file(path_of(rank_files[rank])));
    }
    hashes.push_back(std::move(written));
  }
  return hashes;
}

}  // namespace rannc
