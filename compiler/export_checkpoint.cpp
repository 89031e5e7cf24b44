#include "compiler/export_checkpoint.h"

#include <filesystem>

#include "compiler/torch_plugin.h"
#include "frontends/pt2/pt2_frontend.h"
#include "plan/checkpoint.h"
#include "plan/plan_json.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {

std::string run_export(const ExportOptions& options) {
  namespace fs = std::filesystem;
  auto folder = plan::find_checkpoint(options.checkpoint, "export");
  auto manifest = plan::read_checkpoint_manifest(folder);
  auto plan = plan::read_plan_file(plan::checked_checkpoint_file(folder, manifest, plan::kCheckpointPlanFile));
  TorchPlugin::ExportRequest request;
  for (const auto& stage : plan.stages) {
    TorchPlugin::ExportRequest::StageFiles files{{}, stage.tensor_parallel.weights};
    for (int rank = 0; rank < stage.tensor_parallel.degree; ++rank)
      files.files.push_back(plan::checked_checkpoint_file(folder, manifest, plan::stage_weights_file(stage, rank)));
    request.stages.push_back(std::move(files));
  }
  request.output = options.output;
  request.module_output = options.module_output;
  // A TorchScript model gives the state_dict its order and the entries no stage holds (a buffer
  // no op reads); an ONNX model's names are its initializers', as the stages have them.
  if (plan.model.format == "torchscript") {
    request.model = options.model_path.empty() ? plan.model_file() : options.model_path;
    if (sha256_of_file(request.model) != plan.model.sha256)
      throw InputError("export: " + request.model + " is not the model the checkpoint was trained from (its SHA-256 differs; --model names it)");
  } else if (plan.model.format == "pt2") {
    auto model = options.model_path.empty() ? plan.model_file() : options.model_path;
    for (const auto& entry : pt2_state_dict_names(model)) {
      if (entry.name == entry.held_as) request.state_dict_names.push_back(entry.name);
      else request.state_dict_aliases.emplace_back(entry.name, entry.held_as);
    }
  }
  if (plan.model.format != "torchscript" && !options.module_output.empty()) {
    throw InputError("export --module: the checkpoint's model is " + plan.model.format + ", not TorchScript");
  }
  auto result = torch_plugin().export_checkpoint(request);
  std::string line = "exported " + std::to_string(result.trained) + " trained tensors of step " +
                     std::to_string(manifest.step) + " to " + options.output;
  if (result.untouched > 0) line += " (and " + std::to_string(result.untouched) + " the stages do not hold, as in the model)";
  if (!options.module_output.empty()) line += "; the model with them to " + options.module_output;
  return line;
}

}  // namespace rannc
