#include <memest/dtype.hpp>
#include <memest/error.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace memest;

TEST_CASE("dtype sizes in bits", "[dtype]") {
  auto [d, b] = GENERATE(table<Dtype, unsigned>({{Dtype::fp32, 32},
                                                 {Dtype::fp16, 16},
                                                 {Dtype::bf16, 16},
                                                 {Dtype::fp8_e4m3, 8},
                                                 {Dtype::fp8_e5m2, 8},
                                                 {Dtype::int8, 8},
                                                 {Dtype::int4, 4},
                                                 {Dtype::nf4, 4}}));
  CAPTURE(dtype_name(d));
  REQUIRE(bits(d) == b);
  REQUIRE(parse_dtype(dtype_name(d)) == d);
}

TEST_CASE("bytes round 4-bit types up to whole bytes", "[dtype]") {
  REQUIRE(bytes_for(Dtype::fp32, 7'000'000'000) == 28'000'000'000);
  REQUIRE(bytes_for(Dtype::nf4, 3) == 2);
  REQUIRE(bytes_for(Dtype::int4, 4) == 2);
  REQUIRE(bytes_per_element(Dtype::nf4) == 0.5);
}

TEST_CASE("bytes per element as text reads as fmt writes the number", "[dtype]") {
  for (const std::string_view name : dtype_names()) {
    const Dtype d = parse_dtype(name);
    CAPTURE(name);
    REQUIRE(bytes_per_element_text(d) == fmt::format("{}", bytes_per_element(d)));
  }
}

TEST_CASE("dtype names and errors", "[dtype]") {
  REQUIRE(parse_dtype("bfloat16") == Dtype::bf16);
  REQUIRE(parse_dtype("float32") == Dtype::fp32);
  REQUIRE_THROWS_WITH(parse_dtype("fp64"),
                      "unknown dtype \"fp64\" (expected one of: fp32, fp16, bf16, fp8_e4m3, "
                      "fp8_e5m2, int8, int4, nf4)");
}
