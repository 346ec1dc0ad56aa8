#include "base/compiled_format.hpp"
#include "base/numbers.hpp"

#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <locale>
#include <optional>
#include <sstream>
#include <string_view>

namespace memest {
namespace {

__extension__ using u128 = unsigned __int128;

constexpr std::uint64_t kMax = UINT64_MAX;

// A decimal number parsed exactly: value = mantissa * 10^exponent. Doubles would turn
// 6.7B into 6699999999.999, so the digits are kept as an integer.
struct Decimal {
  u128 mantissa = 0;
  int exponent = 0;
  bool truncated = false;  // non-zero digits past the ones kept were dropped
};

// Digits kept: 2^70 is past any 64-bit result by a factor of 64, so the digits dropped beyond
// it change nothing but exactness (1.00000000000000000000000000B is 1e9 bytes, not too large).
constexpr u128 kMantissaCap = u128{1} << 70;

std::string quoted(std::string_view text) { return fmt::format("\"{}\"", text); }

bool same_letters(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// Reads "[digits][.digits][e[+-]digits]" from the front of `text`; returns the rest in `rest`.
std::optional<Decimal> parse_decimal(std::string_view text, std::string_view& rest) {
  Decimal d;
  std::size_t i = 0;
  bool any_digit = false;
  bool dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.' && !dot) {
      dot = true;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(c))) break;
    any_digit = true;
    if (d.mantissa > kMantissaCap) {  // more digits than matter: drop them, scale instead
      if (!dot) ++d.exponent;
      d.truncated = d.truncated || c != '0';
      continue;
    }
    d.mantissa = d.mantissa * 10 + static_cast<unsigned>(c - '0');
    if (dot) --d.exponent;
  }
  if (!any_digit) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E') && i + 1 < text.size()) {
    std::size_t j = i + 1;
    bool negative = false;
    if (text[j] == '+' || text[j] == '-') negative = text[j++] == '-';
    int exp = 0;
    std::size_t start = j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j])) && exp < 1000) {
      exp = exp * 10 + (text[j++] - '0');
    }
    if (j > start) {
      d.exponent += negative ? -exp : exp;
      i = j;
    }
  }
  rest = text.substr(i);
  // Trailing zeros after the point say nothing about the value: 2.50 is 25e-1.
  while (d.exponent < 0 && d.mantissa != 0 && d.mantissa % 10 == 0) {
    d.mantissa /= 10;
    ++d.exponent;
  }
  return d;
}

// mantissa * 10^exponent * multiplier, rounded down; nullopt on overflow. `exact` reports
// whether nothing was rounded away.
std::optional<std::uint64_t> scale(Decimal d, std::uint64_t multiplier, bool& exact) {
  exact = !d.truncated;
  if (d.mantissa == 0) return 0;  // the dropped digits of a zero mantissa are zeros too
  u128 value = d.mantissa;        // < 2^74: ten times the cap, or kMax * 100 after scaling up
  int e = d.exponent;
  for (; e > 0; --e) {
    if (value > u128{kMax} * 10) return std::nullopt;
    value *= 10;
  }
  // value < 2^74 and multiplier <= 2^41, so the product stays below 2^115 (about 10^35), and
  // the divisor stops growing once it passes the product: the quotient is then zero.
  if (multiplier > (std::uint64_t{1} << 41)) return std::nullopt;
  const u128 product = value * multiplier;
  u128 divisor = 1;
  for (; e < 0; ++e) {
    if (divisor > product) {
      exact = false;
      return 0;
    }
    divisor *= 10;
  }
  const u128 result = product / divisor;
  exact = exact && product % divisor == 0;
  if (result > kMax) return std::nullopt;
  return static_cast<std::uint64_t>(result);
}

struct UnitInfo {
  std::string_view name;
  std::string_view label;
  std::uint64_t bytes;
};

constexpr std::array<UnitInfo, 9> kUnits = {{
    {"bytes", "B", 1},
    {"kB", "kB", 1'000},
    {"KiB", "KiB", 1ULL << 10},
    {"MB", "MB", 1'000'000},
    {"MiB", "MiB", 1ULL << 20},
    {"GB", "GB", 1'000'000'000},
    {"GiB", "GiB", 1ULL << 30},
    {"TB", "TB", 1'000'000'000'000},
    {"TiB", "TiB", 1ULL << 40},
}};

constexpr std::array<std::string_view, 9> kUnitNames = {"bytes", "kB",  "KiB", "MB", "MiB",
                                                        "GB",    "GiB", "TB",  "TiB"};

std::string joined_unit_names() { return fmt::format("{}", fmt::join(kUnitNames, ", ")); }

}  // namespace

void throw_size_overflow() {
  throw SizeOverflow("size overflow: the estimate exceeds 2^64 bytes (18.4 EB); check the inputs");
}

std::span<const std::string_view> unit_names() { return kUnitNames; }

Unit parse_unit(std::string_view text) {
  // Case does not matter: every unit name differs from the others in more than case.
  for (std::size_t i = 0; i < kUnits.size(); ++i) {
    if (same_letters(kUnits[i].name, text) || same_letters(kUnits[i].label, text))
      return static_cast<Unit>(i);
  }
  throw Error(
      fmt::format("unknown unit {} (expected one of: {})", quoted(text), joined_unit_names()));
}

std::string_view unit_label(Unit unit) { return kUnits[static_cast<std::size_t>(unit)].label; }

std::uint64_t unit_bytes(Unit unit) { return kUnits[static_cast<std::size_t>(unit)].bytes; }

std::uint64_t parse_count(std::string_view text) {
  const auto fail = [&](std::string_view why) -> Error {
    return Error(fmt::format(
        "{} {} (expected a positive whole count such as 7B, 6.7B, 125M, 1.3e9 or 6738415616)", why,
        quoted(text)));
  };
  std::string_view rest;
  auto d = parse_decimal(text, rest);
  if (!d) throw fail("not a count:");
  std::uint64_t multiplier = 1;
  if (same_letters(rest, "k")) {
    multiplier = 1'000;
  } else if (same_letters(rest, "M")) {
    multiplier = 1'000'000;
  } else if (same_letters(rest, "B") || same_letters(rest, "G")) {
    multiplier = 1'000'000'000;
  } else if (same_letters(rest, "T")) {
    multiplier = 1'000'000'000'000;
  } else if (!rest.empty()) {
    throw fail("not a count:");
  }
  bool exact = true;
  auto value = scale(*d, multiplier, exact);
  if (!value) throw fail("count too large:");
  if (!exact) throw fail("not a whole number:");
  if (*value == 0) throw fail("count must be positive, got");
  return *value;
}

std::uint64_t parse_bytes(std::string_view text) {
  const auto fail = [&](std::string_view why) -> Error {
    return Error(
        fmt::format("{} {} (expected a size with a unit such as 80GiB, 80GB, 512MiB or 4096B)", why,
                    quoted(text)));
  };
  std::string_view rest;
  auto d = parse_decimal(text, rest);
  if (!d) throw fail("not a size:");
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  // A bare number is refused: "--budget 80" meant 80 GB or GiB, not 80 bytes. Units match
  // whatever their case (80gb, 80GiB, 512mib): no two differ only in case.
  if (rest.empty()) throw fail("a size needs a unit:");
  std::uint64_t multiplier = 0;
  for (const auto& u : kUnits) {
    if (same_letters(u.label, rest) || same_letters(u.name, rest)) multiplier = u.bytes;
  }
  if (multiplier == 0) throw fail("unknown size unit in");
  bool exact = true;
  auto value = scale(*d, multiplier, exact);
  if (!value) throw fail("size too large:");
  if (*value == 0) throw fail("size must be positive, got");
  return *value;
}

std::string format_bytes(std::uint64_t bytes, Unit unit) {
  if (unit == Unit::bytes) return format_count(bytes) + " B";
  const double value = static_cast<double>(bytes) / static_cast<double>(unit_bytes(unit));
  // A few bytes are not nothing: "< 0.01 GB", never "0.00 GB".
  if (bytes > 0 && value < 0.005) return fmt::format("< 0.01 {}", unit_label(unit));
  return detail::compiled_format(FMT_COMPILE("{:.2f} {}"), value, unit_label(unit));
}

std::string format_count(std::uint64_t count) {
  // The digits (fmt writes two at a time), then copied with a comma before every third from
  // the end.
  const fmt::format_int digits(count);
  const char* d = digits.data();
  const std::size_t n = digits.size();
  std::string out(n + (n - 1) / 3, ',');
  char* o = out.data();
  // Groups of three digits, the first one to three long; the commas are already there.
  for (std::size_t i = 0, group = (n - 1) % 3 + 1; i < n; group = 3) {
    for (std::size_t k = 0; k < group; ++k) *o++ = d[i++];
    if (i < n) ++o;
  }
  return out;
}

std::string format_count_short(std::uint64_t count) {
  const double c = static_cast<double>(count);
  if (count >= 1'000'000'000'000) return fmt::format("{:.2f}T", c / 1e12);
  if (count >= 1'000'000'000) return fmt::format("{:.2f}B", c / 1e9);
  if (count >= 1'000'000) return fmt::format("{:.2f}M", c / 1e6);
  if (count >= 1'000) return fmt::format("{:.2f}k", c / 1e3);
  return std::to_string(count);
}

// A whole text as a double, in the C locale's form whatever the process locale is.
bool parse_double(std::string_view text, double& v) {
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && ptr == text.data() + text.size();
#else
  // libc++ before 17 (emscripten's, for the web page) has no floating-point from_chars: a stream
  // in the classic locale reads the same forms; from_chars takes no leading space or '+',
  // nor hexadecimal (general format).
  if (text.empty() || text[0] == '+' || std::isspace(static_cast<unsigned char>(text[0])) ||
      text.find_first_of("xX") != std::string_view::npos) {
    return false;
  }
  std::istringstream in{std::string(text)};
  in.imbue(std::locale::classic());
  in >> v;
  return !in.fail() && in.peek() == std::char_traits<char>::eof();
#endif
}

}  // namespace memest
