#include "support/executable.h"

namespace rannc {

std::filesystem::path executable_folder() {
  std::error_code error;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path() : exe.parent_path();
}

}  // namespace rannc
