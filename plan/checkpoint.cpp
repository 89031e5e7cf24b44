#include "plan/checkpoint.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "support/error.h"
#include "support/input_file.h"
#include "support/sha256.h"

namespace rannc::plan {
namespace {

constexpr const char* kManifestFormat = "rannc-checkpoint";
constexpr std::uint64_t kMaxManifestBytes = std::uint64_t{16} << 20;

std::string numbered(const char* pattern, int number) {
  char name[64];
  std::snprintf(name, sizeof name, pattern, number);
  return name;
}

// "stage_<i>", or "stage_<i>_tp<t>" in a tensor-parallel stage.
std::string stage_file_stem(const Stage& stage, int tensor_rank) {
  auto stem = numbered("stage_%d", stage.id);
  return stage.tensor_parallel.degree > 1 ? stem + numbered("_tp%d", tensor_rank) : stem;
}

}  // namespace

std::string checkpoint_folder_name(int step) { return numbered("step_%08d", step); }
std::string stage_weights_file(const Stage& stage, int tensor_rank) { return stage_file_stem(stage, tensor_rank) + ".pt"; }
std::string stage_optimizer_file(const Stage& stage, int tensor_rank) {
  return stage_file_stem(stage, tensor_rank) + ".optimizer.pt";
}
std::string rank_state_file(int rank) { return numbered("rank_%d.pt", rank); }
std::string rank_optimizer_file(int rank) { return numbered("rank_%d.optimizer.pt", rank); }

std::string find_checkpoint(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(path, error)) throw InputError(what + " " + path + ": not a folder");
  if (fs::exists(fs::path(path) / kCheckpointManifestFile, error)) return path;
  auto latest = (fs::path(path) / kLatestCheckpointFile).string();
  if (!fs::exists(latest, error))
    throw InputError(what + " " + path + ": no checkpoint (neither " + kCheckpointManifestFile + " nor " +
                     kLatestCheckpointFile + ")");
  std::string name = read_regular_file(latest, 256, "checkpoint pointer");
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw InputError(latest + ": does not name a checkpoint folder");
  auto folder = (fs::path(path) / name).string();
  if (!fs::exists(fs::path(folder) / kCheckpointManifestFile, error))
    throw InputError(latest + ": names " + name + ", which holds no " + kCheckpointManifestFile);
  return folder;
}

CheckpointManifest read_checkpoint_manifest(const std::string& folder) {
  auto path = (std::filesystem::path(folder) / kCheckpointManifestFile).string();
  std::string text = read_regular_file(path, kMaxManifestBytes, "checkpoint manifest");
  check_json_depth(text, path);
  try {
    auto json = nlohmann::json::parse(text);
    int version = json.value("version", 0);
    if (json.value("format", "") != kManifestFormat || version < 1 || version > kCheckpointVersion)
      throw InputError(path + ": not a rannc-run checkpoint of format version 1 to " + std::to_string(kCheckpointVersion));
    CheckpointManifest manifest;
    manifest.version = version;
    manifest.step = json.at("step").get<int>();
    manifest.plan_sha256 = json.at("plan_sha256").get<std::string>();
    manifest.model_sha256 = json.at("model_sha256").get<std::string>();
    manifest.optimizer = json.at("optimizer").get<std::string>();
    manifest.seed = json.at("seed").get<std::uint64_t>();
    manifest.accumulate_steps = json.at("accumulate_steps").get<int>();
    manifest.files = json.at("files").get<std::map<std::string, std::string>>();
    if (manifest.step < 0) throw InputError(path + ": negative step");
    return manifest;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path + ": malformed checkpoint manifest: " + clip(e.what(), 120));
  }
}

std::string checkpoint_manifest_json(const CheckpointManifest& manifest) {
  nlohmann::json json = {{"format", kManifestFormat},
                         {"version", kCheckpointVersion},
                         {"step", manifest.step},
                         {"plan_sha256", manifest.plan_sha256},
                         {"model_sha256", manifest.model_sha256},
                         {"optimizer", manifest.optimizer},
                         {"seed", manifest.seed},
                         {"accumulate_steps", manifest.accumulate_steps},
                         {"files", manifest.files}};
  return json.dump(1) + "\n";
}

std::string checked_checkpoint_file(const std::string& folder, const CheckpointManifest& manifest,
                                    const std::string& file) {
  auto path = (std::filesystem::path(folder) / file).string();
  auto listed = manifest.files.find(file);
  if (listed == manifest.files.end()) throw InputError(path + ": not listed in the checkpoint's manifest");
  if (sha256_of_file(path) != listed->second)
    throw InputError(path + ": changed since the checkpoint was written (its SHA-256 differs from the manifest's)");
  return path;
}

}  // namespace rannc::plan
