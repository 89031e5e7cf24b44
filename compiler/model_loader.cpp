#include <algorithm>
#include <filesystem>
#include <fstream>

#include "compiler/model.h"
#include "frontends/foreign_file.h"
#include "frontends/frontend.h"
#include "frontends/pt2/pt2_archive.h"
#include "support/error.h"

namespace rannc {
namespace {

void check_readable(const std::string& path) {
  std::error_code error;
  auto status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) throw InputError(path + ": no such file");
  if (!std::filesystem::is_regular_file(status)) throw InputError(path + ": not a regular file");
  if (std::filesystem::file_size(path, error) == 0) throw InputError(path + ": empty file");
  if (!std::ifstream(path, std::ios::binary)) throw InputError(path + ": cannot open for reading");
}

bool starts_like_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  // A local file header, or the end record of an archive with no entries.
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' &&
         ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5 && magic[3] == 6));
}

// The frontend whose kind of file this is, by content (frontends/frontend.h).
const Frontend& frontend_for(const FileProbe& probe) {
  for (const auto* frontend : frontends())
    if (frontend->recognizes(probe)) return *frontend;
  if (probe.zip && probe.zip->entries().empty()) throw InputError(probe.path + ": an empty zip archive (no model in it)");
  auto what = probe.zip ? describe_foreign_zip(*probe.zip) : std::nullopt;
  if (!what && probe.zip && !Pt2Archive::describe_other(*probe.zip).empty()) what = Pt2Archive::describe_other(*probe.zip);
  throw InputError(probe.path + ": " + what.value_or(std::string("a zip archive that is neither TorchScript (torch.jit.save) "
                                                                 "nor torch.export (.pt2): ") + kExportAdvice));
}

}  // namespace

Model load_model(const std::string& path, const LoadOptions& options) {
  check_readable(path);
  if (options.batch && *options.batch <= 0) throw InputError("--batch must be a positive integer");
  FileProbe probe{path, std::nullopt};
  if (starts_like_zip(path)) {
    probe.zip = ZipArchive::open(path);
    if (!probe.zip) throw InputError(path + ": a damaged zip archive (its directory cannot be read)");
  } else if (auto what = describe_foreign_file(path)) {
    // Not a zip: what the frontends would misread as a damaged ONNX protobuf (a safetensors
    // file, a NumPy array, a plan.json, ...) is named by its magic bytes first.
    throw InputError(path + ": " + *what);
  }
  Model model = frontend_for(probe).load(path, options);
  model.graph.validate();
  return model;
}

}  // namespace rannc
