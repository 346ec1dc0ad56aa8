#pragma once

#include <span>
#include <string>
#include <string_view>

namespace memest {

/// Levenshtein distance between two strings.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// ` (did you mean "x"?)` for the first candidate that `given` begins, else for the candidate
/// closest to `given` when it is close enough (at most a third of the longer name, and at least
/// one edit), or an empty string.
std::string did_you_mean(std::string_view given, std::span<const std::string_view> candidates);

}  // namespace memest
