#include "support/error.h"

namespace rannc {

std::string first_line(const std::string& text) {
  auto start = text.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return "";
  std::string line = text.substr(start, text.find('\n', start) - start);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r' || line.back() == '\t')) {
    line.pop_back();
  }
  return line;
}

}  // namespace rannc
