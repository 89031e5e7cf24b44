#include "frontends/frontend.h"

#include "frontends/onnx/onnx_frontend.h"
#include "compiler/torch_plugin.h"
#include "frontends/pt2/pt2_frontend.h"

namespace rannc {
namespace {

bool has_entry_ending(const ZipArchive& zip, const std::string& suffix) {
  for (const auto& entry : zip.entries()) {
    auto slash = entry.find('/');
    if (slash != std::string::npos && entry.compare(slash + 1, std::string::npos, suffix) == 0) return true;
  }
  return false;
}

// torch.export's archives (frontends/pt2).
class Pt2Frontend : public Frontend {
 public:
  ModelFormat format() const override { return ModelFormat::kPt2; }
  bool recognizes(const FileProbe& probe) const override { return probe.zip && Pt2Archive::recognize(*probe.zip); }
  Model load(const std::string& path, const LoadOptions& options) const override { return load_pt2(path, options); }
};

// torch.jit.save's archives: <name>/data.pkl beside <name>/code/ (torch_side, in the plugin).
class TorchScriptFrontend : public Frontend {
 public:
  ModelFormat format() const override { return ModelFormat::kTorchScript; }
  bool recognizes(const FileProbe& probe) const override {
    return probe.zip && has_entry_ending(*probe.zip, "data.pkl") &&
           (has_entry_ending(*probe.zip, "constants.pkl") || Pt2Archive::describe_other(*probe.zip).empty());
  }
  Model load(const std::string& path, const LoadOptions& options) const override {
    return torch_plugin().load_torchscript(path, options);
  }
};

// ONNX protobuf has no magic number: what is no zip is given to it, which says when it does not parse.
class OnnxFrontend : public Frontend {
 public:
  ModelFormat format() const override { return ModelFormat::kOnnx; }
  bool recognizes(const FileProbe& probe) const override { return !probe.zip; }
  Model load(const std::string& path, const LoadOptions& options) const override { return load_onnx(path, options); }
};

}  // namespace

const std::vector<const Frontend*>& frontends() {
  static const Pt2Frontend pt2;
  static const TorchScriptFrontend torchscript;
  static const OnnxFrontend onnx;
  static const std::vector<const Frontend*> all = {&pt2, &torchscript, &onnx};
  return all;
}

}  // namespace rannc
