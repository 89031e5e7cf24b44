// One line from a libtorch exception, for the parts that run libtorch (the torch plugin and the
// runtime). Header-only: c10::Error needs no torch library to name.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include <c10/util/Exception.h>

#include "support/error.h"

namespace rannc {

// The error without libtorch's backtrace. The TorchScript interpreter puts a TorchScript
// traceback first and the error last; that last line is the one kept.
inline std::string torch_message(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  constexpr std::string_view kInterpreter = "The following operation failed in the TorchScript interpreter.";
  if (text.rfind(kInterpreter, 0) == 0) {
    auto end = text.find_last_not_of(" \n");
    auto begin = text.rfind('\n', end);
    if (end != std::string::npos && begin != std::string::npos) return text.substr(begin + 1, end - begin);
  }
  return first_line(text);
}

}  // namespace rannc
