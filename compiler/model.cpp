#include "compiler/model.h"

#include <algorithm>

#include "support/error.h"

namespace rannc {

std::string_view model_format_name(ModelFormat format) {
  switch (format) {
    case ModelFormat::kOnnx: return "onnx";
    case ModelFormat::kPt2: return "pt2";
    case ModelFormat::kTorchScript: break;
  }
  return "torchscript";
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

void check_tensor_size(const std::string& path, const std::string& what, const std::vector<std::int64_t>& dims,
                       ir::DType dtype) {
  constexpr double kMaxBytes = 9007199254740992.0;  // 2^53
  auto numel = ir::checked_numel(dims);
  double bytes = numel ? static_cast<double>(*numel) * std::max(ir::dtype_size(dtype), 1) : 0;
  if (numel && bytes <= kMaxBytes) return;
  std::string shape;
  for (auto d : dims) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  throw InputError(path + ": " + what + " has dims " + shape + ": " +
                   (numel ? "more than 2^53 bytes" : "its element count overflows a 64-bit integer") +
                   ", beyond any real tensor");
}

}  // namespace rannc
