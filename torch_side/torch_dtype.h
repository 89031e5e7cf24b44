// libtorch tensor types of IR dtypes, and random tensors of them, for the parts that run libtorch
// (the torch plugin and the runtime). Header-only, so the pure libraries stay free of torch.
#pragma once

#include <optional>

#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <c10/core/ScalarType.h>

#include "ir/dtype.h"

namespace rannc::ir {

// nullopt for types libtorch has no tensors of.
inline std::optional<c10::ScalarType> to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return c10::kFloat;
    case DType::kFloat64: return c10::kDouble;
    case DType::kFloat16: return c10::kHalf;
    case DType::kBFloat16: return c10::kBFloat16;
    case DType::kInt64: return c10::kLong;
    case DType::kInt32: return c10::kInt;
    case DType::kInt16: return c10::kShort;
    case DType::kInt8: return c10::kChar;
    case DType::kUInt8: return c10::kByte;
    case DType::kBool: return c10::kBool;
    default: return std::nullopt;
  }
}

// The IR dtype of a libtorch tensor type; kUnknown for types the IR does not have.
inline DType to_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat: return DType::kFloat32;
    case c10::kDouble: return DType::kFloat64;
    case c10::kHalf: return DType::kFloat16;
    case c10::kBFloat16: return DType::kBFloat16;
    case c10::kLong: return DType::kInt64;
    case c10::kInt: return DType::kInt32;
    case c10::kShort: return DType::kInt16;
    case c10::kChar: return DType::kInt8;
    case c10::kByte: return DType::kUInt8;
    case c10::kBool: return DType::kBool;
    case c10::kComplexFloat: return DType::kComplex64;
    case c10::kComplexDouble: return DType::kComplex128;
    default: return DType::kUnknown;
  }
}

// Random values for made-up inputs: floats standard normal, bools 0 or 1, integers in
// [0, index_bound) so that lookups stay in their tables.
inline at::Tensor random_tensor(c10::ScalarType type, at::IntArrayRef shape, at::Generator& generator,
                                std::int64_t index_bound) {
  auto options = at::TensorOptions().dtype(type);
  if (at::isFloatingType(type)) return at::randn(shape, generator, options);
  return at::randint(0, type == c10::kBool ? 2 : index_bound, shape, generator, options);
}

}  // namespace rannc::ir
