// Errors that reach the user as one line and an exit status (see docs/contract.md, "Exit status").
#pragma once

#include <stdexcept>
#include <string>

namespace rannc {

enum class ExitStatus : int {
  kOk = 0,
  kCannotMeet = 1,  // a valid request that no plan satisfies (e.g. the model does not fit)
  kBadInput = 2,    // bad usage or unreadable, malformed or unsupported input
};

// An error the user can act on. The message is one line naming the file, op or option at fault.
class Error : public std::runtime_error {
 public:
  Error(ExitStatus status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  ExitStatus status() const { return status_; }

 private:
  ExitStatus status_;
};

// Bad usage or unreadable/unsupported input: exit status 2.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(ExitStatus::kBadInput, message) {}
};

// Keeps the first non-empty line of a library's message and drops trailing whitespace, so that errors from
// libtorch or protobuf (which carry backtraces and notes) still print as one line.
std::string first_line(const std::string& text);

}  // namespace rannc
