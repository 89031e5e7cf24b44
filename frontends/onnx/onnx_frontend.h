// The ONNX frontend: parses a .onnx file into the IR with shapes from ONNX shape inference.
//
// Initializers stored as external data are read for their dims only; their data files are never
// opened, so a model of any size is planned from a file of a few hundred KB.
#pragma once

#include <memory>
#include <string>

#include "compiler/model.h"
#include "frontends/onnx/onnx_stage_source.h"

namespace onnx {
class ModelProto;
}

namespace rannc {

class OnnxModelSource : public ModelSource {
 public:
  explicit OnnxModelSource(std::shared_ptr<const onnx::ModelProto> proto) : proto_(std::move(proto)) {}
  const onnx::ModelProto& proto() const { return *proto_; }
  std::optional<StageSource> stage_source(const Model& model, const emit::StageLayout& stage,
                                          int tensor_rank) const override {
    return onnx_stage_source(model.path, *proto_, model.graph, stage, tensor_rank);
  }
  std::string reference_note() const override {
    return "ONNX: the reference is the whole model through the same op mapping, so this checks the partition; the "
           "mapping itself is tested against PyTorch";
  }

 private:
  std::shared_ptr<const onnx::ModelProto> proto_;
};

Model load_onnx(const std::string& path, const LoadOptions& options);

}  // namespace rannc
