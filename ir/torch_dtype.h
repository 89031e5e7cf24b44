// The libtorch tensor type of an IR dtype, for the parts that run libtorch (the torch plugin and
// the runtime). Header-only: c10's ScalarType needs no torch library to name.
#pragma once

#include <optional>

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

}  // namespace rannc::ir
