// ONNX stages as TorchScript: each ONNX op of a stage is mapped to aten calls in generated
// TorchScript source, which the torch plugin compiles with Module::define after registering the
// attributes below. There is no ONNX-to-TorchScript converter in Debian; this is ours. Pure C++.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "emit/stage_layout.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace onnx {
class ModelProto;
}

namespace rannc {

// A tensor the stage module holds: a weight of the stage (its StageLayout stage_name, "p0",
// "b1") or a constant too large to write inline ("c0", ...).
struct StageAttribute {
  std::string stage_name;
  bool trainable = false;           // a parameter (else a buffer)
  ir::DType dtype = ir::DType::kFloat32;
  std::vector<std::int64_t> dims;
  std::string data;                 // the elements, raw little-endian, numel * element size bytes
};

struct StageSource {
  // TorchScript source of one method, "def forward(self, <inputs>) -> Tuple[...]:", that takes
  // the stage's inputs in StageLayout order and returns the tuple of its outputs in order.
  std::string forward;
  std::vector<StageAttribute> attributes;
};

// Throws InputError naming the model and the first ONNX op type (with its node name) that has
// no mapping, or a weight whose data is not available (external data that was not loaded).
StageSource onnx_stage_source(const std::string& model_path, const onnx::ModelProto& model, const ir::Graph& graph,
                              const emit::StageLayout& stage);

// The variable a value named `name` is bound to in generated source, a valid and readable
// TorchScript name: "onnx::Add_12" -> "v_onnx__Add_12" (a suffix "_N" keeps variables unique
// where two names give the same one). Inline: the torch plugin names ops by it.
inline std::string stage_variable_name(const std::string& name) {
  std::string out = "v_";
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  return out;
}

}  // namespace rannc
