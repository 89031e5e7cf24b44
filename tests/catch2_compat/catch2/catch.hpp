// <catch2/catch.hpp> under Catch2 3 (Debian 13), which has no such header: the tests are written
// against Catch2 2 (Debian 12). On the include path only when CMake finds Catch2 3 (tests/CMakeLists.txt).
#pragma once
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>

namespace Catch {
namespace Matchers {
// Catch2 2's name of ContainsSubstring.
inline StringContainsMatcher Contains(const std::string& text, CaseSensitive sensitivity = CaseSensitive::Yes) {
  return ContainsSubstring(text, sensitivity);
}
}  // namespace Matchers
// Catch2 2 also has the string matchers in namespace Catch, and Approx outside it.
using Matchers::Contains;
using Matchers::EndsWith;
using Matchers::Matches;
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;
