// Progress lines on stderr for runs a person waits on: what each phase did and when it ended,
// so that a plan of seconds is not silence. stdout keeps only the result (the table, --json).
#pragma once

#include <chrono>
#include <string>

namespace rannc {

class Progress {
 public:
  enum class When {
    kAuto,    // on a terminal, once the run has taken over a second (a quick run prints nothing)
    kAlways,  // --progress: every line, terminal or not
    kNever,   // --quiet
  };
  Progress(std::string tool, When when);
  Progress() : Progress("", When::kNever) {}

  // "rannc-partition: [  1.2 s] searched 412 layouts" once `what` has ended.
  void done(const std::string& what) const;

 private:
  std::string tool_;
  When when_;
  bool terminal_;
  std::chrono::steady_clock::time_point start_;
};

// --progress and --quiet, checked: both at once is a mistake.
Progress::When progress_when(bool progress, bool quiet);

}  // namespace rannc
