#include <memest/suggest.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace memest {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(std::string_view given, std::span<const std::string_view> candidates) {
  // A name that begins a candidate is a short form ("h100" for "h100-80gb"): a better guess
  // than the nearest spelling.
  for (auto c : candidates) {
    if (given.size() >= 2 && c.size() > given.size() && c.starts_with(given)) {
      return fmt::format(" (did you mean \"{}\"?)", c);
    }
  }
  std::string_view best;
  std::size_t best_distance = SIZE_MAX;
  for (auto c : candidates) {
    const auto d = edit_distance(given, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  const std::size_t limit = std::max<std::size_t>(2, std::max(given.size(), best.size()) / 3);
  if (best.empty() || best_distance == 0 || best_distance > limit) return "";
  return fmt::format(" (did you mean \"{}\"?)", best);
}

}  // namespace memest
