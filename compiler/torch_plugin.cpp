// The torch plugin's entry point: the one symbol the loader looks up.
#include "compiler/torch_plugin.h"

namespace rannc {

Model load_torchscript(const std::string& path, const LoadOptions& options);  // torchscript_frontend.cpp

namespace {

class TorchPluginImpl : public TorchPlugin {
 public:
  Model load_torchscript(const std::string& path, const LoadOptions& options) override {
    return rannc::load_torchscript(path, options);
  }
};

}  // namespace
}  // namespace rannc

extern "C" rannc::TorchPlugin* rannc_torch_plugin_instance() {
  static rannc::TorchPluginImpl instance;
  return &instance;
}
