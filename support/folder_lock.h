// An exclusive lock on an output folder (flock on FOLDER/.lock), so that two runs writing into
// the same folder at once fail fast instead of leaving a mix of both runs' files. The lock goes
// with the process: a killed run never leaves the folder locked.
#pragma once

#include <string>

namespace rannc {

class FolderLock {
 public:
  // Throws Error (exit 1) "FOLDER: another rannc-partition (pid N) is writing into this folder;
  // wait for it or choose another -o" when the lock is held, InputError when it cannot be made.
  explicit FolderLock(const std::string& folder);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace rannc
