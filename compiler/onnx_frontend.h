// The ONNX frontend: parses a .onnx file into the IR with shapes from ONNX shape inference.
//
// Initializers stored as external data are read for their dims only; their data files are never
// opened, so a model of any size is planned from a file of a few hundred KB.
#pragma once

#include <memory>
#include <string>

#include "compiler/model.h"

namespace onnx {
class ModelProto;
}

namespace rannc {

class OnnxModelSource : public ModelSource {
 public:
  explicit OnnxModelSource(std::shared_ptr<const onnx::ModelProto> proto) : proto_(std::move(proto)) {}
  const onnx::ModelProto& proto() const { return *proto_; }

 private:
  std::shared_ptr<const onnx::ModelProto> proto_;
};

Model load_onnx(const std::string& path, const LoadOptions& options);

}  // namespace rannc
