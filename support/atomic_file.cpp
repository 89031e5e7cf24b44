#include "support/atomic_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/error.h"

namespace rannc {

void write_file_atomically(const std::string& path, const std::string& content, const std::string& what) {
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) {
      std::remove(temporary.c_str());
      throw InputError(path + ": cannot write " + what);
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::remove(temporary.c_str());
    throw InputError(path + ": cannot write " + what + ": " + ec.message());
  }
}

}  // namespace rannc
