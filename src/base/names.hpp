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

/// The `name` of each row of a constant table, in the table's order: the names a choice takes
/// (for --help, messages and the schema), made once at compile time.
template <typename Row, std::size_t N>
constexpr std::array<std::string_view, N> row_names(const std::array<Row, N>& rows) {
  std::array<std::string_view, N> names{};
  for (std::size_t i = 0; i < N; ++i) names[i] = rows[i].name;
  return names;
}

}  // namespace memest::detail
