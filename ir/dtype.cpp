#include "ir/dtype.h"

#include <array>
#include <utility>

namespace rannc::ir {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int size;
};

constexpr std::array<DTypeInfo, 13> kDTypes{{
    {DType::kUnknown, "unknown", 0},
    {DType::kFloat64, "float64", 8},
    {DType::kFloat32, "float32", 4},
    {DType::kFloat16, "float16", 2},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kInt64, "int64", 8},
    {DType::kInt32, "int32", 4},
    {DType::kInt16, "int16", 2},
    {DType::kInt8, "int8", 1},
    {DType::kUInt8, "uint8", 1},
    {DType::kBool, "bool", 1},
    {DType::kComplex64, "complex64", 8},
    {DType::kComplex128, "complex128", 16},
}};

constexpr std::array<std::pair<std::string_view, DType>, 9> kAliases{{
    {"float", DType::kFloat32},
    {"fp32", DType::kFloat32},
    {"double", DType::kFloat64},
    {"fp64", DType::kFloat64},
    {"half", DType::kFloat16},
    {"fp16", DType::kFloat16},
    {"bf16", DType::kBFloat16},
    {"long", DType::kInt64},
    {"int", DType::kInt32},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

int dtype_size(DType dtype) { return info(dtype).size; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name && entry.dtype != DType::kUnknown) return entry.dtype;
  }
  for (const auto& [alias, dtype] : kAliases) {
    if (alias == name) return dtype;
  }
  return std::nullopt;
}

bool is_floating_point(DType dtype) {
  return dtype == DType::kFloat64 || dtype == DType::kFloat32 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

std::optional<DType> dtype_from_onnx(int elem_type) {
  switch (elem_type) {
    case 1: return DType::kFloat32;
    case 2: return DType::kUInt8;
    case 3: return DType::kInt8;
    case 5: return DType::kInt16;
    case 6: return DType::kInt32;
    case 7: return DType::kInt64;
    case 9: return DType::kBool;
    case 10: return DType::kFloat16;
    case 11: return DType::kFloat64;
    case 14: return DType::kComplex64;
    case 15: return DType::kComplex128;
    case 16: return DType::kBFloat16;
    default: return std::nullopt;
  }
}

}  // namespace rannc::ir
