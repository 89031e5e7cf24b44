#include "support/nearest_name.h"

#include <algorithm>

namespace rannc {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: three rows of the table (the swap looks two rows back).
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) current[j] = std::min(current[j], before[j - 2] + 1);
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& names) {
  constexpr std::size_t kMostEdits = 2;
  std::optional<std::string> best;
  std::size_t best_distance = kMostEdits + 1;
  for (const auto& name : names) {
    std::size_t distance = edit_distance(word, name);
    if (distance < best_distance && 2 * distance < word.size()) {
      best = name;
      best_distance = distance;
    }
  }
  return best;
}

}  // namespace rannc
