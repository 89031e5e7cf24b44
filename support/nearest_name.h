// "Did you mean ...?": the known name closest to a mistyped one (--gpu for --gpus).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rannc {

// The number of single-character insertions, deletions, substitutions and swaps of two
// neighbours that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The name of `names` nearest to `word`, when it is near enough to be what was meant: at most 2
// edits, and fewer than half the word's length. Ties go to the first in `names`.
std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& names);

}  // namespace rannc
