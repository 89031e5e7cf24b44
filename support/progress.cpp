#include "support/progress.h"

#include <cstdio>
#include <utility>

#include <unistd.h>

#include "support/error.h"

namespace rannc {

Progress::Progress(std::string tool, When when)
    : tool_(std::move(tool)), when_(when), terminal_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

void Progress::done(const std::string& what) const {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const bool show = when_ == When::kAlways || (when_ == When::kAuto && terminal_ && seconds > 1.0);
  if (!show) return;
  // One write per line: lines of concurrent runs sharing a terminal do not interleave mid-line.
  std::fprintf(stderr, "%s: [%6.1f s] %s\n", tool_.c_str(), seconds, what.c_str());
  std::fflush(stderr);
}

Progress::When progress_when(bool progress, bool quiet) {
  if (progress && quiet) throw InputError("--progress and --quiet: give one of them");
  if (progress) return Progress::When::kAlways;
  return quiet ? Progress::When::kNever : Progress::When::kAuto;
}

}  // namespace rannc
