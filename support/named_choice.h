// Parsing an option whose value names one of a few choices (--precision, --optimizer,
// --schedule): one error shape for all, listing the known names.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

#include "support/error.h"

namespace rannc {

// The choice whose name_of() is `name`; otherwise InputError
// "WHAT NAME: unknown KIND (known: a, b, c)".
template <typename Choice, typename NameOf>
Choice parse_named_choice(std::string_view name, std::string_view what, std::string_view kind,
                          std::initializer_list<Choice> choices, NameOf name_of) {
  std::string known;
  for (Choice choice : choices) {
    if (name_of(choice) == name) return choice;
    known += (known.empty() ? "" : ", ") + std::string(name_of(choice));
  }
  throw InputError(std::string(what) + " " + std::string(name) + ": unknown " + std::string(kind) + " (known: " + known + ")");
}

}  // namespace rannc
