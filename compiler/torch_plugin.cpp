// The torch plugin's entry point: the one symbol the loader looks up.
#include "compiler/torch_plugin.h"

namespace rannc {

// torchscript_frontend.cpp
Model load_torchscript(const std::string& path, const LoadOptions& options);
// torch_profiler.cpp
cost::DeviceProfile measure_cpu();
std::vector<std::optional<cost::OpMeasurement>> profile_torchscript_ops(const Model& model,
                                                                        const std::vector<ir::OpId>& ops,
                                                                        const std::vector<bool>& requires_grad, int reps,
                                                                        const TorchPlugin::Progress& progress);
TorchPlugin::StepMeasurement measure_torchscript_step(const Model& model, int reps);

namespace {

class TorchPluginImpl : public TorchPlugin {
 public:
  Model load_torchscript(const std::string& path, const LoadOptions& options) override {
    return rannc::load_torchscript(path, options);
  }
  cost::DeviceProfile measure_device() override { return measure_cpu(); }
  std::vector<std::optional<cost::OpMeasurement>> profile_ops(const Model& model, const std::vector<ir::OpId>& ops,
                                                              const std::vector<bool>& requires_grad, int reps,
                                                              const Progress& progress) override {
    return profile_torchscript_ops(model, ops, requires_grad, reps, progress);
  }
  StepMeasurement measure_training_step(const Model& model, int reps) override {
    return measure_torchscript_step(model, reps);
  }
};

}  // namespace
}  // namespace rannc

extern "C" rannc::TorchPlugin* rannc_torch_plugin_instance() {
  static rannc::TorchPluginImpl instance;
  return &instance;
}
