#include <memest/error.hpp>
#include <memest/units.hpp>

#include <catch2/catch.hpp>

using namespace memest;

TEST_CASE("counts parse exactly", "[units]") {
  auto [text, value] = GENERATE(table<std::string, std::uint64_t>({
      {"7B", 7'000'000'000},
      {"6.7B", 6'700'000'000},
      {"125M", 125'000'000},
      {"350k", 350'000},
      {"1.3e9", 1'300'000'000},
      {"6738415616", 6'738'415'616},
      {"0.5T", 500'000'000'000},
      {"70G", 70'000'000'000},
      {"1e3", 1000},
      // issue 12: suffixes in any case ("7b" was refused)
      {"7b", 7'000'000'000},
      {"125m", 125'000'000},
      {"350K", 350'000},
      {"1t", 1'000'000'000'000},
  }));
  CAPTURE(text);
  REQUIRE(parse_count(text) == value);
}

TEST_CASE("bad counts are rejected with the value named", "[units]") {
  auto [text, message] = GENERATE(table<std::string, std::string>({
      {"abc", "not a count: \"abc\""},
      {"-7B", "not a count: \"-7B\""},
      {"0", "count must be positive, got \"0\""},
      {"1.5", "not a whole number: \"1.5\""},
      {"nan", "not a count: \"nan\""},
      {"7X", "not a count: \"7X\""},
      {"1e30", "count too large: \"1e30\""},
      {"18446744073709551616", "count too large: \"18446744073709551616\""},
  }));
  CAPTURE(text);
  REQUIRE_THROWS_WITH(parse_count(text), Catch::StartsWith(message));
}

TEST_CASE("sizes parse in decimal and binary units", "[units]") {
  REQUIRE(parse_bytes("80GiB") == 80ULL << 30);
  REQUIRE(parse_bytes("80GB") == 80'000'000'000ULL);
  REQUIRE(parse_bytes("512MiB") == 512ULL << 20);
  REQUIRE(parse_bytes("1.5TB") == 1'500'000'000'000ULL);
  REQUIRE(parse_bytes("4096B") == 4096);
  REQUIRE(parse_bytes("0.5KiB") == 512);
  REQUIRE_THROWS_WITH(parse_bytes("80 parsecs"), Catch::StartsWith("unknown size unit in"));
  REQUIRE_THROWS_AS(parse_bytes("0GB"), Error);
}

TEST_CASE("issue 12: a size needs a unit, in any case", "[units]") {
  // "--budget 80" was read as 80 bytes and reported as 0.00 GB usable.
  REQUIRE_THROWS_WITH(parse_bytes("80"),
                      "a size needs a unit: \"80\" (expected a size with a unit such as 80GiB, "
                      "80GB, 512MiB or 4096B)");
  REQUIRE_THROWS_WITH(parse_bytes("1000000"), Catch::StartsWith("a size needs a unit"));
  auto [text, value] = GENERATE(table<std::string, std::uint64_t>({
      {"80gb", 80'000'000'000ULL},
      {"80gib", 80ULL << 30},
      {"80GIB", 80ULL << 30},
      {"512mib", 512ULL << 20},
      {"2kb", 2'000},
      {"2KB", 2'000},
      {"2kib", 2'048},
      {"1tb", 1'000'000'000'000ULL},
      {"4096b", 4'096},
      {"4096 bytes", 4'096},
  }));
  CAPTURE(text);
  REQUIRE(parse_bytes(text) == value);
}

TEST_CASE("checked arithmetic throws instead of wrapping", "[units]") {
  REQUIRE(checked_mul(1ULL << 32, (1ULL << 32) - 1) == 0xFFFFFFFF00000000ULL);
  REQUIRE_THROWS_WITH(checked_mul(1ULL << 32, 1ULL << 32), Catch::StartsWith("size overflow"));
  REQUIRE_THROWS_AS(checked_add(UINT64_MAX, 1), Error);
  REQUIRE(ceil_div(7, 2) == 4);
}

TEST_CASE("sizes are formatted with exact unit labels", "[units]") {
  REQUIRE(format_bytes(28'000'000'000, Unit::GB) == "28.00 GB");
  REQUIRE(format_bytes(28'000'000'000, Unit::GiB) == "26.08 GiB");
  REQUIRE(format_bytes(1ULL << 30, Unit::GiB) == "1.00 GiB");
  REQUIRE(format_bytes(1'500'000, Unit::MB) == "1.50 MB");
  REQUIRE(format_bytes(28'000'000'000, Unit::bytes) == "28,000,000,000 B");
  REQUIRE(format_count(6738415616) == "6,738,415,616");
  REQUIRE(format_count(999) == "999");
  REQUIRE(format_count(0) == "0");
  REQUIRE(format_count(1000) == "1,000");
  REQUIRE(format_count(UINT64_MAX) == "18,446,744,073,709,551,615");
  REQUIRE(format_count_short(6738415616) == "6.74B");
  REQUIRE(parse_unit("GiB") == Unit::GiB);
  // issue 12: unit names in any case; a nonzero size never prints as 0.00
  REQUIRE(parse_unit("gib") == Unit::GiB);
  REQUIRE(parse_unit("gb") == Unit::GB);
  REQUIRE(parse_unit("B") == Unit::bytes);
  REQUIRE(format_bytes(1'164, Unit::GB) == "< 0.01 GB");
  REQUIRE(format_bytes(0, Unit::GB) == "0.00 GB");
  REQUIRE(format_bytes(5'000'000, Unit::GB) == "0.01 GB");
  REQUIRE_THROWS_WITH(
      parse_unit("gigabytes"),
      "unknown unit \"gigabytes\" (expected one of: bytes, kB, KiB, MB, MiB, GB, GiB, TB, TiB)");
}

TEST_CASE("issue 12: long decimals are read exactly, not called too large", "[units]") {
  // Trailing zeros carry no value; digits past the 21 kept only decide exactness.
  REQUIRE(parse_bytes("1.00000000000000000000000000B") == 1);
  REQUIRE(parse_bytes("1.00000000000000000000000000GB") == 1'000'000'000);
  REQUIRE(parse_count("6.70000000000000000000000000000000B") == 6'700'000'000);
  REQUIRE(parse_bytes("12345678901234567890123.456e-5B") == 123'456'789'012'345'678);
  REQUIRE(parse_bytes("1.5e-9GB") == 1);
  REQUIRE_THROWS_WITH(parse_count("1.000000000000000000000000000000000001B"),
                      Catch::StartsWith("not a whole number:"));
  REQUIRE_THROWS_WITH(parse_bytes("0.00000000000000000000000000001GB"),
                      Catch::StartsWith("size must be positive"));
  REQUIRE_THROWS_WITH(parse_bytes("18446744073709551616B"), Catch::StartsWith("size too large"));
  REQUIRE(parse_bytes("18446744073709551615.999999999999999999999999B") == UINT64_MAX);
}
