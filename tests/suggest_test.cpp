#include <memest/suggest.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <string_view>

using namespace memest;

TEST_CASE("edit distance counts insertions, deletions and substitutions", "[suggest]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("adamw", "adamw") == 0);
  CHECK(edit_distance("adamw", "adam") == 1);           // a deletion
  CHECK(edit_distance("optimiser", "optimizer") == 1);  // a substitution
  CHECK(edit_distance("kitten", "sitting") == 3);       // the textbook case
  CHECK(edit_distance("", "abc") == 3);
}

TEST_CASE("did you mean: a prefix first, else the nearest close spelling", "[suggest]") {
  constexpr std::array<std::string_view, 4> gpus = {"a100-40gb", "a100-80gb", "h100-80gb", "t4"};
  // "h100" begins a name: the short form wins over any spelling.
  CHECK(did_you_mean("h100", gpus) == " (did you mean \"h100-80gb\"?)");
  CHECK(did_you_mean("a100-80bg", gpus) == " (did you mean \"a100-80gb\"?)");  // two edits
  CHECK(did_you_mean("t5", gpus) == " (did you mean \"t4\"?)");  // within the floor of 2 edits
  CHECK(did_you_mean("mi300x", gpus).empty());                   // nothing close
  CHECK(did_you_mean("t4", gpus).empty());                       // an exact name needs no hint
  CHECK(did_you_mean("x", std::span<const std::string_view>{}).empty());
}
