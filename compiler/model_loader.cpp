#include <algorithm>
#include <filesystem>
#include <fstream>

#include "compiler/model.h"
#include "compiler/onnx_frontend.h"
#include "compiler/torch_plugin.h"
#include "support/error.h"

namespace rannc {
namespace {

bool has_extension(const std::string& path, std::initializer_list<const char*> extensions) {
  auto ext = std::filesystem::path(path).extension().string();
  for (const char* candidate : extensions) {
    if (ext == candidate) return true;
  }
  return false;
}

// TorchScript archives are zip files; ONNX files are protobuf with no magic number.
bool starts_like_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

void check_readable(const std::string& path) {
  std::error_code error;
  auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) throw InputError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw InputError(path + ": not a regular file");
  if (std::filesystem::file_size(path, error) == 0) throw InputError(path + ": empty file");
  if (!std::ifstream(path, std::ios::binary)) throw InputError(path + ": cannot open for reading");
}

ModelFormat detect_format(const std::string& path) {
  if (has_extension(path, {".onnx"})) return ModelFormat::kOnnx;
  if (has_extension(path, {".pt", ".pth", ".ts", ".torchscript"})) return ModelFormat::kTorchScript;
  return starts_like_zip(path) ? ModelFormat::kTorchScript : ModelFormat::kOnnx;
}

}  // namespace

Model load_model(const std::string& path, const LoadOptions& options) {
  check_readable(path);
  if (options.batch && *options.batch <= 0) throw InputError("--batch must be a positive integer");
  Model model = detect_format(path) == ModelFormat::kOnnx ? load_onnx(path, options)
                                                          : torch_plugin().load_torchscript(path, options);
  model.graph.validate();
  return model;
}

}  // namespace rannc
