// Writing an output file so that readers see the old file or the whole new one, never a part:
// write a temporary beside it, then rename over it.
#pragma once

#include <string>

namespace rannc {

// Throws InputError "PATH: cannot write WHAT[: reason]" on failure, leaving no temporary behind.
void write_file_atomically(const std::string& path, const std::string& content, const std::string& what);

}  // namespace rannc
