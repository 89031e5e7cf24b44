// Where the running program lives, so that the tools can find what is installed beside them
// (the torch plugin, rannc-run) wherever the build or install tree is.
#pragma once

#include <filesystem>

namespace rannc {

// The folder of the running executable (from /proc/self/exe, symlinks resolved); empty when
// the system does not say.
std::filesystem::path executable_folder();

}  // namespace rannc
