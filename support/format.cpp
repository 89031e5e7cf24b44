#include "support/format.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

namespace rannc {
namespace {

std::string scaled(double amount, const char* const units[], int count, double step) {
  int unit = 0;
  while (amount >= step && unit + 1 < count) {
    amount /= step;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", amount, units[unit]);
  return text;
}

}  // namespace

std::string plural(std::int64_t n, const std::string& noun, const std::string& nouns) {
  return std::to_string(n) + " " + (n == 1 ? noun : nouns.empty() ? noun + "s" : nouns);
}

std::string with_commas(std::int64_t n) {
  std::string digits = std::to_string(n);
  int first_digit = n < 0 ? 1 : 0;
  for (int i = static_cast<int>(digits.size()) - 3; i > first_digit; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string human_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  return scaled(bytes, units, 6, 1024);
}

std::string human_flops(double flops) {
  static const char* const units[] = {"FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  return scaled(flops, units, 6, 1000);
}


std::string human_ms(double ms) {
  char text[64];
  if (ms >= 1000) std::snprintf(text, sizeof text, "%.3f s", ms / 1000);
  else std::snprintf(text, sizeof text, ms >= 10 ? "%.1f ms" : "%.3f ms", ms);
  return text;
}

std::string ranges_text(std::vector<int> numbers) {
  std::sort(numbers.begin(), numbers.end());
  std::string text;
  for (std::size_t i = 0; i < numbers.size();) {
    std::size_t j = i;
    while (j + 1 < numbers.size() && numbers[j + 1] <= numbers[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(numbers[i]);
    if (numbers[j] != numbers[i]) text += "-" + std::to_string(numbers[j]);
    i = j + 1;
  }
  return text;
}

std::string shell_word(const std::string& text) {
  auto safe = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || (c != '\0' && std::strchr("@%+=:,./-_", c) != nullptr);
  };
  if (!text.empty() && std::all_of(text.begin(), text.end(), safe)) return text;
  return shell_quoted(text);
}

std::string shell_quoted(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string join(const std::vector<std::string>& words, const std::string& separator) {
  std::string joined;
  for (const auto& word : words) joined += (joined.empty() ? "" : separator) + word;
  return joined;
}

}  // namespace rannc
