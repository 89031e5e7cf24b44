#include "support/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/error.h"
#include "support/format.h"

namespace rannc {
namespace {

using nlohmann::json;

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

[[noreturn]] void not_regular(const std::string& path, mode_t mode) {
  throw InputError(path + ": not a regular file (" + kind_of(mode) + ")");
}

// Cuts `text` to `max_chars` on a UTF-8 character boundary, marking the cut with "...".
std::string cut(std::string text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  std::size_t end = max_chars;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  return text + "...";
}

std::string dump_scalar(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

void excerpt(const json& value, std::string& out, std::size_t max_chars, int depth) {
  if (!value.is_structured()) {
    out += cut(dump_scalar(value), max_chars + 1);
    return;
  }
  bool array = value.is_array();
  if (depth >= 2) {
    out += value.empty() ? (array ? "[]" : "{}") : (array ? "[...]" : "{...}");
    return;
  }
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (out.size() > max_chars) {
      out += ", ...";
      break;
    }
    if (!first) out += ", ";
    first = false;
    if (!array) out += cut(dump_scalar(json(it.key())), max_chars + 1) + ": ";
    excerpt(*it, out, max_chars, depth + 1);
  }
  out += array ? ']' : '}';
}

// Depth-first over our own documents (a plan nests a handful of levels), with an explicit stack.
struct Pending {
  const json* value;
  std::string path;
};

}  // namespace

void check_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw InputError(path + ": no such file");
    throw InputError(path + ": cannot read: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) not_regular(path, info.st_mode);
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const std::string& kind) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw InputError(path + ": no such file");
    throw InputError(path + ": cannot read: " + std::strerror(errno));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw InputError(path + ": cannot read: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) not_regular(path, info.st_mode);
  auto too_large = [&](std::uint64_t bytes) {
    throw InputError(path + ": " + human_bytes(static_cast<double>(bytes)) + " is more than the " +
                     human_bytes(static_cast<double>(max_bytes)) + " " + kind + " may have");
  };
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes) too_large(static_cast<std::uint64_t>(info.st_size));
  std::string content;
  content.reserve(static_cast<std::size_t>(info.st_size));
  std::vector<char> buffer(1 << 16);
  for (;;) {
    ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError(path + ": cannot read: " + std::strerror(errno));
    }
    if (got == 0) break;
    content.append(buffer.data(), static_cast<std::size_t>(got));
    if (content.size() > max_bytes) too_large(content.size());  // a file that grows while read
  }
  return content;
}

void check_json_depth(std::string_view text, const std::string& path, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw InputError(path + ": JSON nested deeper than " + std::to_string(max_depth) + " levels (at byte " +
                         std::to_string(i) + ")");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars) {
  std::string out;
  excerpt(value, out, max_chars, 0);
  return cut(std::move(out), max_chars);
}

std::string clip(std::string text, std::size_t max_chars) { return cut(std::move(text), max_chars); }

std::string text_excerpt(std::string_view text, std::size_t max_chars) {
  std::string quoted = dump_scalar(json(std::string(text.substr(0, max_chars + 8))));
  return cut(quoted.substr(1, quoted.size() - 2), max_chars);
}

std::optional<std::string> first_non_finite(const nlohmann::json& value) {
  std::vector<Pending> stack{{&value, ""}};
  while (!stack.empty()) {
    Pending item = std::move(stack.back());
    stack.pop_back();
    const json& v = *item.value;
    if (v.is_number_float() && !std::isfinite(v.get<double>())) return item.path;
    if (v.is_array()) {
      for (std::size_t i = v.size(); i-- > 0;) stack.push_back({&v[i], item.path + "[" + std::to_string(i) + "]"});
    } else if (v.is_object()) {
      std::vector<Pending> children;
      for (auto it = v.begin(); it != v.end(); ++it)
        children.push_back({&*it, item.path.empty() ? it.key() : item.path + "." + it.key()});
      stack.insert(stack.end(), children.rbegin(), children.rend());
    }
  }
  return std::nullopt;
}

}  // namespace rannc
