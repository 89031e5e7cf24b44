// Content hashes: plans and the profile DB name a model by the SHA-256 of its file, so a
// renamed copy is recognised and an edited file is not.
#pragma once

#include <string>
#include <string_view>

namespace rannc {

// Lowercase hex SHA-256 of the file's bytes; InputError naming the file when it cannot be read.
std::string sha256_of_file(const std::string& path);

// Lowercase hex SHA-256 of `text`.
std::string sha256_of_text(std::string_view text);

}  // namespace rannc
