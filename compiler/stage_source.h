// A stage as generated TorchScript source: what the frontends without a TorchScript module of
// their own (ONNX, torch.export's .pt2) write for each stage, and the torch plugin compiles with
// Module::define after registering the attributes. Pure C++.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace rannc {

// A tensor's elements as a file stored them: contiguous, little-endian.
struct StoredTensor {
  ir::DType dtype = ir::DType::kUnknown;
  std::vector<std::int64_t> dims;
  std::string data;  // numel * element size bytes
};

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

// The variable a value named `name` is bound to in generated source, a valid and readable
// TorchScript name: "onnx::Add_12" -> "v_onnx__Add_12" (a suffix "_N" keeps variables unique
// where two names give the same one). Inline: the torch plugin names ops by it.
inline std::string stage_variable_name(const std::string& name) {
  std::string out = "v_";
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  return out;
}

}  // namespace rannc
