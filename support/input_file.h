// Reading input files that people hand us (plans, cluster descriptions, profile DBs) without
// trusting them: only regular files (a FIFO or /dev/zero would be read forever), at most a size
// limit, JSON nested at most so deep (nlohmann::json and the error messages quoting a value
// would otherwise recurse without bound), and values quoted short in error messages.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rannc {

inline constexpr std::uint64_t kMaxJsonFileBytes = std::uint64_t{256} << 20;  // 256 MiB
inline constexpr int kMaxJsonDepth = 128;

// Throws InputError "PATH: not a regular file (a character device)" (and the like) unless the
// path names a regular file; "PATH: no such file" when it names nothing.
void check_regular_file(const std::string& path);

// The whole content of a regular file of at most `max_bytes`, opened without blocking (a FIFO
// swapped in after a check is refused, not waited on). InputError naming the file otherwise:
// "PATH: 300.00 MiB is more than the 256.00 MiB a KIND may have".
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, const std::string& kind);

// InputError "PATH: JSON nested deeper than 128 levels (at byte N)" when arrays and objects
// nest deeper than `max_depth`; text that is not JSON is left to the parser to report.
void check_json_depth(std::string_view text, const std::string& path, int max_depth = kMaxJsonDepth);

// A value as JSON for an error message: at most about `max_chars` characters, nested values
// shown two levels deep ("[[1, 2], [...]]"), never recursing further.
std::string json_excerpt(const nlohmann::json& value, std::size_t max_chars = 60);
// `text` cut to `max_chars` (on a UTF-8 boundary, marked "..."), for library messages.
std::string clip(std::string text, std::size_t max_chars = 200);
// A string for an error message: control characters escaped (one line), cut to `max_chars`.
std::string text_excerpt(std::string_view text, std::size_t max_chars = 60);

// The path ("stages[1].predicted.fwd_ms") of the first number in `value` that is NaN or
// infinite, which nlohmann::json would write as null.
std::optional<std::string> first_non_finite(const nlohmann::json& value);

}  // namespace rannc
