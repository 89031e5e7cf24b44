// The line `--version` prints on both tools: this project's version and the libtorch and ONNX it
// was built against (compile definitions from CMake, cmd/CMakeLists.txt).
#pragma once

#include <string>

namespace rannc {

// "0.1.0": this project's version alone (plan.json's generator).
inline std::string version_number() { return RANNC_VERSION; }

inline std::string version_line(const std::string& tool) {
  return tool + " " RANNC_VERSION " (libtorch " RANNC_TORCH_VERSION ", ONNX " RANNC_ONNX_VERSION ")";
}

}  // namespace rannc
