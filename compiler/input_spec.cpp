#include "compiler/input_spec.h"

#include <charconv>

#include "ir/graph.h"
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

// Fields are read from the right, so a name may itself contain ':' (tf2onnx names inputs
// "input:0"): NAME:DIMS or NAME:DIMS:DTYPE, where DIMS starts with a digit.
InputSpec parse_input_spec(std::string_view text) {
  auto fields = split(text, ':');
  auto is_dims = [](std::string_view field) { return !field.empty() && field.front() >= '0' && field.front() <= '9'; };
  bool has_dtype = fields.size() >= 3 && !is_dims(fields.back());
  std::size_t dims_field = fields.size() - (has_dtype ? 2 : 1);
  if (fields.size() < 2 || dims_field == 0 || text.front() == ':') {
    throw InputError("bad --input '" + std::string(text) + "': expected NAME:DIMS[:DTYPE], e.g. tokens:8x128:int64");
  }
  InputSpec spec;
  spec.name = std::string(text.substr(0, static_cast<std::size_t>(fields[dims_field].data() - text.data()) - 1));
  for (auto dim : split(fields[dims_field], 'x')) spec.dims.push_back(parse_dim(dim, text));
  if (!ir::checked_numel(spec.dims)) {
    throw InputError("bad --input '" + std::string(text) + "': the shape has more elements than int64 can count");
  }
  if (has_dtype) {
    auto dtype = ir::parse_dtype(fields.back());
    if (!dtype) {
      throw InputError("bad --input '" + std::string(text) + "': unknown dtype '" + std::string(fields.back()) +
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
