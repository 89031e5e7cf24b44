// Example inputs given on the command line: --input NAME:DIMS[:DTYPE], e.g. tokens:8x128:int64.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"

namespace rannc {

struct InputSpec {
  std::string name;
  std::vector<std::int64_t> dims;  // the batch dim first
  ir::DType dtype = ir::DType::kFloat32;
};

// Throws InputError naming the spec and what is wrong with it.
InputSpec parse_input_spec(std::string_view text);

// "tokens:8x128:int64"
std::string format_input_spec(const InputSpec& spec);

}  // namespace rannc
