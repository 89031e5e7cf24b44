// Writing an output file so that readers see the old file or the whole new one, never a part:
// write a temporary beside it (a name no other process uses), then rename over it.
#pragma once

#include <string>

namespace rannc {

// Throws InputError "PATH: cannot write[ WHAT]: REASON" (e.g. "OUT/stage_1.pt: cannot write: No
// space left on device") on failure, leaving no temporary behind.
void write_file_atomically(const std::string& path, const std::string& content, const std::string& what = "");

// Checks, before a long run, that write_file_atomically(path, ...) will be able to create its
// temporary beside `path`: creates and removes one. InputError "WHAT PATH: cannot create:
// REASON" (or "...: is a directory") otherwise.
void check_can_write(const std::string& path, const std::string& what);

}  // namespace rannc
