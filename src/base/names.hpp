#pragma once
// Private: the one way an enum's name table is parsed, so every "unknown X" message reads alike.

#include <memest/error.hpp>

#include <fmt/format.h>

#include <array>
#include <span>
#include <string_view>
#include <utility>

namespace memest::detail {

/// The enum value whose name is `text` (names[i] names value i), or one of `aliases`; throws
/// Error `unknown <what> "<text>" (expected one of: <names>)`.
template <typename Enum, std::size_t N>
Enum parse_enum(const std::array<std::string_view, N>& names, std::string_view text,
                std::string_view what,
                std::span<const std::pair<std::string_view, Enum>> aliases = {}) {
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<Enum>(i);
  }
  for (const auto& [alias, value] : aliases) {
    if (alias == text) return value;
  }
  throw Error(
      fmt::format("unknown {} \"{}\" (expected one of: {})", what, text, fmt::join(names, ", ")));
}

}  // namespace memest::detail
