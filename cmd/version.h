// The line `--version` prints on both tools: this project's version and the libtorch and ONNX it
// was built against (compile definitions from CMake, cmd/CMakeLists.txt).
#pragma once

#include <string>

namespace rannc {

inline std::string version_line(const std::string& tool) {
  return tool + " " RANNC_VERSION " (libtorch " RANNC_TORCH_VERSION ", ONNX " RANNC_ONNX_VERSION ")";
}

}  // namespace rannc
