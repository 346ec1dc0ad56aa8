#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace memest {

/// Byte and element counts: the type of every size memest computes.
using u64 = std::uint64_t;

/// Throws the Error for a size past 2^64 bytes.
[[noreturn]] void throw_size_overflow();

/// a * b for byte and element counts; throws Error when the result does not fit in 64 bits
/// (an estimate past 2^64 bytes is an input error, never a wrap-around). Inline: searches call
/// it millions of times a second.
inline std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw_size_overflow();
  return r;
}
/// a + b; throws Error on overflow, like checked_mul.
inline std::uint64_t checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw_size_overflow();
  return r;
}
/// ceil(a / b) for b > 0.
constexpr std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return a / b + (a % b != 0); }

/// Units for printing sizes. Decimal units are powers of 10 (GB = 10^9 bytes), binary units
/// powers of 2 (GiB = 2^30 bytes), as in IEC 80000-13.
enum class Unit { bytes, kB, KiB, MB, MiB, GB, GiB, TB, TiB };

/// The names accepted by --units, in display order.
std::span<const std::string_view> unit_names();
/// Parses a unit name ("GB", "GiB", "bytes", "B", ...) in any case; throws Error listing the
/// accepted names.
Unit parse_unit(std::string_view text);
/// The label printed after a number, e.g. "GiB"; "B" for bytes.
std::string_view unit_label(Unit unit);
/// Bytes in one `unit`.
std::uint64_t unit_bytes(Unit unit);

/// Parses an element count exactly: "7B", "6.7B", "125M", "350k", "1.3e9", "6738415616".
/// Suffixes in either case: k = 10^3, M = 10^6, B/G = 10^9, T = 10^12. The result must be a
/// positive whole number; throws Error otherwise (fractions, zero, negatives, NaN, overflow).
std::uint64_t parse_count(std::string_view text);

/// Parses a size in bytes: "80GiB", "80GB", "512MiB", "1.5TB" or "4096B"; units in any case
/// ("80gb", "80gib"). A bare number is refused (a size needs a unit). Fractional bytes round
/// down. Throws Error on anything else or on overflow.
std::uint64_t parse_bytes(std::string_view text);

/// Formats bytes in `unit` with two decimals and the unit label, e.g. "28.00 GB" ("< 0.01 GB"
/// for a few bytes, never "0.00 GB" for more than none); Unit::bytes
/// prints the exact integer with thousands separators, e.g. "28,000,000,000 B".
std::string format_bytes(std::uint64_t bytes, Unit unit);

/// Formats a count with thousands separators: 6738415616 -> "6,738,415,616".
std::string format_count(std::uint64_t count);

/// A short human count: 6738415616 -> "6.74B", 124439808 -> "124.44M".
std::string format_count_short(std::uint64_t count);

}  // namespace memest
