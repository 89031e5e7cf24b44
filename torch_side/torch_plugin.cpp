// The torch plugin's entry point: the one symbol the loader looks up.
#include "compiler/torch_plugin.h"

#include <torch/csrc/jit/runtime/operator.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/version.h>

#include "torch_side/checkpoint_export.h"
#include "torch_side/state_dict_file.h"
#include "frontends/torchscript/torchscript_source.h"
#include "frontends/torchscript/torchscript_stages.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "torch_side/torch_dtype.h"
#include "torch_side/torch_kernel_fixes.h"

namespace rannc {

// frontends/torchscript/torchscript_frontend.cpp
Model load_torchscript(const std::string& path, const LoadOptions& options);
// torch_profiler.cpp
cost::DeviceProfile measure_profiled_device();
TorchPlugin::CpuMeasurement measure_this_cpu();
std::string profiled_device_name();
std::vector<std::optional<cost::OpMeasurement>> profile_torchscript_ops(const Model& model,
                                                                        const std::vector<ir::OpId>& ops,
                                                                        const std::vector<bool>& requires_grad, int reps,
                                                                        const TorchPlugin::Progress& progress);
TorchPlugin::StepMeasurement measure_torchscript_step(const Model& model, int reps);
std::optional<cost::OpMeasurement> profile_training_loss(const std::vector<std::int64_t>& shape, int reps);
// torch_verify.cpp
TorchPlugin::VerifyReport verify_stages(const TorchPlugin::VerifyRequest& request);
// table_slices.cpp
TensorDict table_slices(const std::string& tables_file, const std::vector<TorchPlugin::TableSlice>& slices);

namespace {

// Saves to `path`; a libtorch failure becomes one line naming `what`. The archive is made in
// memory and written by write_file_atomically: libtorch's own file writer throws again from its
// destructor when the disk fills up (`terminate called`) and leaves a partial file.
template <typename Build>
void save_module(const std::string& what, const std::string& path, const Build& build) {
  std::string bytes;
  try {
    torch::jit::ExportModule(build(), [&bytes](const void* data, std::size_t size) {
      bytes.append(static_cast<const char*>(data), size);
      return size;
    });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(what + ": " + torch_message(e));
  }
  write_file_atomically(path, bytes);
}

StoredTensor stored_tensor(const at::Tensor& tensor, const std::string& what) {
  StoredTensor stored;
  stored.dtype = ir::to_dtype(tensor.scalar_type());
  if (stored.dtype == ir::DType::kUnknown || tensor.is_meta())
    throw InputError(what + ": holds " + (tensor.is_meta() ? "meta tensors (a shape-only export: plan it with --plan-only)"
                                                           : "a tensor of an unsupported dtype"));
  auto contiguous = tensor.detach().to(at::kCPU).contiguous();
  stored.dims = contiguous.sizes().vec();
  stored.data.assign(static_cast<const char*>(contiguous.data_ptr()), contiguous.nbytes());
  return stored;
}

class TorchPluginImpl : public TorchPlugin {
 public:
  Model load_torchscript(const std::string& path, const LoadOptions& options) override {
    return rannc::load_torchscript(path, options);
  }
  cost::DeviceProfile measure_device() override { return measure_profiled_device(); }
  CpuMeasurement measure_cpu() override { return measure_this_cpu(); }
  std::string profiled_device() override { return profiled_device_name(); }
  std::vector<std::optional<cost::OpMeasurement>> profile_ops(const Model& model, const std::vector<ir::OpId>& ops,
                                                              const std::vector<bool>& requires_grad, int reps,
                                                              const Progress& progress) override {
    return profile_torchscript_ops(model, ops, requires_grad, reps, progress);
  }
  std::optional<cost::OpMeasurement> profile_loss(const std::vector<std::int64_t>& shape, int reps) override {
    return profile_training_loss(shape, reps);
  }
  StepMeasurement measure_training_step(const Model& model, int reps) override {
    return measure_torchscript_step(model, reps);
  }
  void save_torchscript_stage(const Model& model, const emit::StageLayout& stage, const std::string& path,
                              int tensor_rank) override {
    std::string what = "stage " + std::to_string(stage.id) +
                       (tensor_rank >= 0 ? " of tensor rank " + std::to_string(tensor_rank) : std::string()) +
                       ": cannot build the stage file";
    save_module(what, path, [&] { return torchscript_stage_module(model, stage, tensor_rank); });
  }
  void save_source_stage(const StageSource& stage, const std::string& path) override {
    save_module(path + ": the generated TorchScript does not compile", path,
                [&] { return source_stage_module(stage, "Stage"); });
  }
  void save_table_slices(const std::string& tables_file, const std::vector<TableSlice>& slices,
                         const std::string& path) override {
    write_file_atomically(path, state_dict_bytes(table_slices(tables_file, slices)));
  }
  VerifyReport verify(const VerifyRequest& request) override { return verify_stages(request); }
  bool has_operator(const std::string& qualified_name) override {
    return !torch::jit::getAllOperatorsFor(c10::Symbol::fromQualString(qualified_name)).empty();
  }
  std::string torch_version() override { return TORCH_VERSION; }
  std::map<std::string, StoredTensor> read_saved_tensors(const std::string& bytes, const std::string& what) override {
    std::map<std::string, StoredTensor> stored;
    for (const auto& [name, tensor] : read_state_dict_bytes(bytes, what)) stored[name] = stored_tensor(tensor, what);
    return stored;
  }
  ExportResult export_checkpoint(const ExportRequest& request) override {
    auto exported = rannc::export_checkpoint(request);
    if (exported.model)
      save_module(request.module_output + ": cannot save the model", request.module_output, [&] { return *exported.model; });
    return exported.result;
  }
};

}  // namespace
}  // namespace rannc

extern "C" rannc::TorchPlugin* rannc_torch_plugin_instance() {
  rannc::mend_torch_kernels();
  static rannc::TorchPluginImpl instance;
  return &instance;
}
