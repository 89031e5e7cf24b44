#include "compiler/input_spec.h"

#include <charconv>

#include "support/error.h"

namespace rannc {
namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    auto end = text.find(separator, start);
    parts.push_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::int64_t parse_dim(std::string_view text, std::string_view spec) {
  std::int64_t dim = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), dim);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || dim <= 0) {
    throw InputError("bad --input '" + std::string(spec) + "': dims must be positive integers joined by 'x' (got '" +
                     std::string(text) + "'), e.g. tokens:8x128:int64");
  }
  return dim;
}

}  // namespace

InputSpec parse_input_spec(std::string_view text) {
  auto fields = split(text, ':');
  if (fields.size() < 2 || fields.size() > 3 || fields[0].empty()) {
    throw InputError("bad --input '" + std::string(text) + "': expected NAME:DIMS[:DTYPE], e.g. tokens:8x128:int64");
  }
  InputSpec spec;
  spec.name = std::string(fields[0]);
  for (auto dim : split(fields[1], 'x')) spec.dims.push_back(parse_dim(dim, text));
  if (fields.size() == 3) {
    auto dtype = ir::parse_dtype(fields[2]);
    if (!dtype) {
      throw InputError("bad --input '" + std::string(text) + "': unknown dtype '" + std::string(fields[2]) +
                       "' (use float32, float16, bfloat16, float64, int64, int32, bool, ...)");
    }
    spec.dtype = *dtype;
  }
  return spec;
}

std::string format_input_spec(const InputSpec& spec) {
  std::string text = spec.name + ":";
  for (std::size_t i = 0; i < spec.dims.size(); ++i) text += (i ? "x" : "") + std::to_string(spec.dims[i]);
  return text + ":" + std::string(ir::dtype_name(spec.dtype));
}

}  // namespace rannc
