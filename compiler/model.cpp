#include "compiler/model.h"

#include <algorithm>

#include "support/error.h"

namespace rannc {

std::string_view model_format_name(ModelFormat format) {
  return format == ModelFormat::kOnnx ? "onnx" : "torchscript";
}

std::optional<std::int64_t> requested_batch(const LoadOptions& options) {
  if (options.batch) return options.batch;
  if (!options.inputs.empty()) return options.inputs.front().dims.front();
  return std::nullopt;
}

void check_input_names(const std::string& path, const LoadOptions& options, const std::vector<std::string>& available) {
  for (const auto& spec : options.inputs) {
    if (std::find(available.begin(), available.end(), spec.name) != available.end()) continue;
    std::string names;
    for (const auto& name : available) names += (names.empty() ? "" : ", ") + name;
    throw InputError(path + ": --input '" + spec.name + "' does not name a model input (inputs: " + names + ")");
  }
}

}  // namespace rannc
