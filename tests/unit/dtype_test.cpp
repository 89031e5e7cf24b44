#include <catch2/catch.hpp>

#include "ir/dtype.h"

using namespace rannc::ir;

TEST_CASE("dtype names round-trip and aliases resolve") {
  for (auto dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt64, DType::kBool}) {
    REQUIRE(parse_dtype(dtype_name(dtype)) == dtype);
  }
  CHECK(parse_dtype("fp32") == DType::kFloat32);
  CHECK(parse_dtype("long") == DType::kInt64);
  CHECK(parse_dtype("bf16") == DType::kBFloat16);
  CHECK_FALSE(parse_dtype("float33").has_value());
  CHECK_FALSE(parse_dtype("unknown").has_value());
}

TEST_CASE("dtype sizes and classes") {
  CHECK(dtype_size(DType::kFloat32) == 4);
  CHECK(dtype_size(DType::kBFloat16) == 2);
  CHECK(dtype_size(DType::kInt64) == 8);
  CHECK(dtype_size(DType::kBool) == 1);
  CHECK(is_floating_point(DType::kFloat16));
  CHECK_FALSE(is_floating_point(DType::kInt32));
}
