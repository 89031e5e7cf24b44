#include "support/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "support/error.h"

namespace rannc {
namespace {

// Unique within the process; with the pid, unique among processes writing the same folder.
std::string temporary_name(const std::string& path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int error) {
  throw InputError(path + ": cannot write" + (what.empty() ? "" : " " + what) + ": " + std::strerror(error));
}

// Writes everything (short writes and interrupts retried); returns 0 or the errno.
int write_all(int fd, const std::string& content) {
  const char* data = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    ssize_t written = ::write(fd, data, left);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (written == 0) return EIO;
    data += written;
    left -= static_cast<std::size_t>(written);
  }
  return 0;
}

}  // namespace

void check_can_write(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) throw InputError(what + " " + path + ": is a directory");
  for (int attempt = 0;; ++attempt) {
    std::string temporary = temporary_name(path);
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(temporary.c_str());
      return;
    }
    if (errno != EEXIST || attempt > 100) throw InputError(what + " " + path + ": cannot create: " + std::strerror(errno));
  }
}

void write_file_atomically(const std::string& path, const std::string& content, const std::string& what) {
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temporary = temporary_name(path);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt > 100)) fail(path, what, errno);
  }
  int error = write_all(fd, content);
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && std::rename(temporary.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    fail(path, what, error);
  }
}

}  // namespace rannc
