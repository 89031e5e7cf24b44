#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "compiler/torch_plugin.h"
#include "support/error.h"
#include "support/executable.h"

namespace rannc {
namespace {

constexpr const char* kPluginFile = "librannc_torch.so";

std::vector<std::filesystem::path> candidate_paths() {
  if (const char* env = std::getenv("RANNC_TORCH_PLUGIN"); env && *env) return {env};
  auto folder = executable_folder();
  // Beside the executable in the build tree; in the install tree, where cmake --install puts it
  // relative to the executable's folder (RANNC_PLUGIN_DIR_FROM_BIN, e.g. ../lib/rannc-partition).
  return {folder / kPluginFile, folder / RANNC_PLUGIN_DIR_FROM_BIN / kPluginFile};
}

TorchPlugin* load_plugin() {
  using Factory = TorchPlugin* (*)();
  // A test binary may link the plugin directly; then the symbol is already here.
  if (auto factory = reinterpret_cast<Factory>(dlsym(RTLD_DEFAULT, "rannc_torch_plugin_instance"))) {
    return factory();
  }
  std::string tried;
  for (const auto& path : candidate_paths()) {
    if (!std::filesystem::exists(path)) {
      tried += (tried.empty() ? "" : ", ") + path.string();
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error(ExitStatus::kBadInput, "cannot load the TorchScript plugin: " + first_line(dlerror()));
    auto factory = reinterpret_cast<Factory>(dlsym(handle, "rannc_torch_plugin_instance"));
    if (!factory) throw Error(ExitStatus::kBadInput, path.string() + ": not a rannc TorchScript plugin");
    return factory();
  }
  throw Error(ExitStatus::kBadInput, "the TorchScript plugin is missing (looked for " + tried + ")");
}

}  // namespace

TorchPlugin& torch_plugin() {
  static TorchPlugin* plugin = load_plugin();
  return *plugin;
}

}  // namespace rannc
