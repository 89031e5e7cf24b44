// Element types of tensors, named as in docs/contract.md ("float32", "int64", ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace rannc::ir {

enum class DType : std::uint8_t {
  kUnknown,
  kFloat64,
  kFloat32,
  kFloat16,
  kBFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
  kComplex64,
  kComplex128,
};

// The canonical name: "float32", "int64", "bool", ...
std::string_view dtype_name(DType dtype);

// Accepts canonical names and the usual aliases ("float", "fp32", "long", "half", "bf16", ...).
std::optional<DType> parse_dtype(std::string_view name);

// Bytes per element; 0 for kUnknown.
int dtype_size(DType dtype);

// The dtype of an ONNX TensorProto.DataType code (stable numbers of the ONNX spec, so the IR
// needs no ONNX headers); nullopt for types the IR does not have (strings, unsigned > 8 bit).
std::optional<DType> dtype_from_onnx(int elem_type);

bool is_floating_point(DType dtype);

}  // namespace rannc::ir
