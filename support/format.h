// Numbers for people: thousands separators, binary byte units, FLOP units, milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rannc {

// "12,345,678"
std::string with_commas(std::int64_t n);
// "1.50 GiB"; bytes below 1 KiB as "512 B".
std::string human_bytes(double bytes);
// "735.20 TFLOP"
std::string human_flops(double flops);
// "12.3 ms", "1.234 s"
std::string human_ms(double ms);
// "1 stage", "3 stages"; `nouns` for an irregular plural ("2 microbatches").
std::string plural(std::int64_t n, const std::string& noun, const std::string& nouns = "");
// Ranks and the like as runs: {0, 1, 2, 3, 8} -> "0-3,8" (sorted first).
std::string ranges_text(std::vector<int> numbers);
// `text` as one POSIX shell word, single-quoted with each ' written as '\''.
std::string shell_quoted(const std::string& text);
// The same, but as it is when every character is safe unquoted (a command line for people).
std::string shell_word(const std::string& text);
// Words joined with `separator`: {"a", "b"} -> "a, b".
std::string join(const std::vector<std::string>& words, const std::string& separator = ", ");

}  // namespace rannc
