// --versions: package versions, read and compared.
#include "input/versions.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <string>
#include <vector>

namespace memest {
namespace {

constexpr std::array<std::string_view, 14> kPackages = {
    "torch",         "transformers",       "peft",      "accelerate", "bitsandbytes",
    "torchao",       "torchtune",          "litgpt",    "lightning",  "torchtitan",
    "megatron-core", "transformer-engine", "deepspeed", "axolotl"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// What may follow the numbers: a local label (+cu121), or a pre-, post- or dev-release as PEP 440
// spells them (a0, b1, rc1, .dev0, .post1, -rc2), a number after it optional.
bool is_suffix(std::string_view rest) {
  if (rest.empty()) return true;
  if (rest[0] == '+') {
    return rest.size() > 1 && std::all_of(rest.begin() + 1, rest.end(), [](char c) {
             return is_letter(c) || is_digit(c) || c == '.';
           });
  }
  if (rest[0] == '.' || rest[0] == '-') rest.remove_prefix(1);
  for (const std::string_view tag : {"dev", "post", "rc", "a", "b"}) {
    if (!rest.starts_with(tag)) continue;
    const std::string_view number = rest.substr(tag.size());
    const auto plus = number.find('+');
    const std::string_view digits = number.substr(0, plus);
    return std::all_of(digits.begin(), digits.end(), is_digit) &&
           (plus == std::string_view::npos || is_suffix(number.substr(plus)));
  }
  return false;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

constexpr std::string_view kForm =
    "PACKAGE=VERSION, comma-separated, as torch=2.4,transformers=4.46";

void add_item(std::string_view where, std::string_view item, Versions& out) {
  const auto eq = item.find('=');
  if (eq == std::string_view::npos)
    throw Error(fmt::format("{}: \"{}\" is not PACKAGE=VERSION (expected {})", where, item, kForm));
  const std::string_view package = trimmed(item.substr(0, eq));
  const std::string_view version = trimmed(item.substr(eq + 1));
  bool known = false;
  for (const auto p : kPackages) known = known || p == package;
  if (!known)
    throw Error(fmt::format("{}: unknown package \"{}\" (expected one of: {})", where, package,
                            fmt::join(kPackages, ", ")));
  if (!parse_version(version))
    throw Error(fmt::format(
        "{}: {}: \"{}\" is not a version (expected numbers separated by dots, as 2.4 or 0.43.2)",
        where, package, version));
  if (!out.emplace(std::string(package), std::string(version)).second)
    throw Error(fmt::format("{}: {} is given twice", where, package));
}

// {"torch": "1.10"} as PACKAGE=VERSION items (the web form gives a JSON object).
std::string items_of_object(std::string_view value, std::string_view where) {
  const auto j = nlohmann::json::parse(value, nullptr, false);
  std::vector<std::string> items;
  const bool strings =
      j.is_object() && std::all_of(j.begin(), j.end(), [](const auto& v) { return v.is_string(); });
  if (!strings || j.empty())
    throw Error(
        fmt::format("{}: \"{}\" is not a JSON object of versions (expected {}, or "
                    "{{\"torch\": \"2.4\"}})",
                    where, value, kForm));
  for (const auto& [package, version] : j.items())
    items.push_back(package + "=" + version.get<std::string>());
  return fmt::format("{}", fmt::join(items, ","));
}

}  // namespace

std::strong_ordering Version::operator<=>(const Version& other) const {
  const std::size_t n = std::max(numbers.size(), other.numbers.size());
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = i < numbers.size() ? numbers[i] : 0;
    const std::uint32_t b = i < other.numbers.size() ? other.numbers[i] : 0;
    if (a != b) return a <=> b;
  }
  return std::strong_ordering::equal;
}

std::optional<Version> parse_version(std::string_view text) {
  Version v;
  std::size_t i = 0;
  while (true) {
    std::uint32_t n = 0;
    const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), n);
    if (ec != std::errc{}) return std::nullopt;
    v.numbers.push_back(n);
    i = static_cast<std::size_t>(end - text.data());
    if (i + 1 < text.size() && text[i] == '.' && is_digit(text[i + 1])) {
      ++i;
      continue;
    }
    break;
  }
  if (!is_suffix(text.substr(i))) return std::nullopt;
  return v;
}

std::span<const std::string_view> versioned_packages() { return kPackages; }

Versions parse_versions(std::string_view value, std::string_view where) {
  Versions out;
  if (trimmed(value).empty())
    throw Error(fmt::format("{}: no versions given (expected {})", where, kForm));
  if (trimmed(value).starts_with('{'))  // the web form's JSON object
    return parse_versions(items_of_object(value, where), where);
  std::string_view rest = value;
  while (true) {
    const auto comma = rest.find(',');
    add_item(where, trimmed(rest.substr(0, comma)), out);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace memest
