#include <catch2/catch.hpp>

#include "compiler/input_spec.h"
#include "support/error.h"

using namespace rannc;

TEST_CASE("input specs parse names, dims and dtypes") {
  auto spec = parse_input_spec("tokens:8x128:int64");
  CHECK(spec.name == "tokens");
  CHECK(spec.dims == std::vector<std::int64_t>{8, 128});
  CHECK(spec.dtype == ir::DType::kInt64);
  CHECK(format_input_spec(spec) == "tokens:8x128:int64");

  auto plain = parse_input_spec("x:4x3x224x224");
  CHECK(plain.dtype == ir::DType::kFloat32);
  CHECK(plain.dims.size() == 4);
}

TEST_CASE("malformed input specs are rejected with the spec in the message") {
  for (const char* bad : {"x", "x:", ":4x4", "x:4xq", "x:4x0", "x:-4", "x:4x4:float33", "x:4:int64:extra", "x:4xx4",
                          "x:99999999999999999999"}) {
    INFO(bad);
    try {
      parse_input_spec(bad);
      FAIL("accepted");
    } catch (const InputError& e) {
      CHECK_THAT(e.what(), Catch::Contains(std::string("'") + bad + "'"));
      CHECK(e.status() == ExitStatus::kBadInput);
    }
  }
}

TEST_CASE("first_line keeps the first non-empty line of a library message") {
  CHECK(first_line("\nUnknown builtin op: a::b.\nmore\n") == "Unknown builtin op: a::b.");
  CHECK(first_line("one line  ") == "one line");
  CHECK(first_line("\n\n") == "");
}

TEST_CASE("input names may contain ':' and shapes must be countable") {
  auto spec = parse_input_spec("input:0:2x8:float16");
  CHECK(spec.name == "input:0");
  CHECK(spec.dims == std::vector<std::int64_t>{2, 8});
  CHECK(spec.dtype == ir::DType::kFloat16);
  CHECK(parse_input_spec("input:0:2x8").name == "input:0");
  CHECK_THROWS_AS(parse_input_spec("x:4000000000x4000000000x4000000000"), InputError);
}
