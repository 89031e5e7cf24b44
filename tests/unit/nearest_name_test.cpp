// "Did you mean ...?" for mistyped options (support/nearest_name.h).
#include <catch2/catch.hpp>

#include "support/nearest_name.h"

using rannc::edit_distance;
using rannc::nearest_name;

TEST_CASE("edit distance counts insertions, deletions, substitutions and swaps", "[support]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("--gpus", "--gpus") == 0);
  CHECK(edit_distance("--gpu", "--gpus") == 1);     // insertion
  CHECK(edit_distance("--gpuss", "--gpus") == 1);   // deletion
  CHECK(edit_distance("--gpas", "--gpus") == 1);    // substitution
  CHECK(edit_distance("--gups", "--gpus") == 1);    // two neighbours swapped
  CHECK(edit_distance("--mem", "--host-mem") == 5);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("the nearest known name, only when near enough to be what was meant", "[support]") {
  const std::vector<std::string> names = {"--gpus", "--gpus-per-node", "--device", "--mem", "--host-mem", "--stages"};
  CHECK(nearest_name("--gpu", names) == "--gpus");
  CHECK(nearest_name("--devcie", names) == "--device");
  CHECK(nearest_name("--stage", names) == "--stages");
  CHECK(nearest_name("--gpus-per-nodes", names) == "--gpus-per-node");
  CHECK_FALSE(nearest_name("--zzz", names));
  CHECK_FALSE(nearest_name("--batch", names));
  CHECK_FALSE(nearest_name("-m", {"-n"}));  // one edit of a two-letter word is half of it
  CHECK_FALSE(nearest_name("--gpu", {}));
  // Ties go to the first name given.
  CHECK(nearest_name("--meme", {"--mem", "--memo"}) == "--mem");
}
