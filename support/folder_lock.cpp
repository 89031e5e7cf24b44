#include "support/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "support/error.h"

namespace rannc {

FolderLock::FolderLock(const std::string& folder) {
  std::string path = (std::filesystem::path(folder) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  if (fd_ < 0) throw InputError(path + ": cannot create the lock file: " + std::strerror(errno));
  int status;
  while ((status = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (status != 0) {
    int error = errno;
    std::string holder;
    if (error == EWOULDBLOCK) {
      char text[32] = {};
      ssize_t got = ::pread(fd_, text, sizeof text - 1, 0);
      if (got > 0 && std::strspn(text, "0123456789") == static_cast<std::size_t>(got)) holder = " (pid " + std::string(text) + ")";
    }
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK) {
      throw Error(ExitStatus::kCannotMeet, folder + ": another rannc-partition" + holder +
                                                " is writing into this folder; wait for it or choose another -o");
    }
    throw InputError(path + ": cannot lock: " + std::strerror(error));
  }
  // Who holds it, for the message above (best effort).
  std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
  }
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace rannc
