// Sizes as polynomials in b and s (include/memest/shape.hpp): what the compiled plan evaluates.
#include <memest/error.hpp>
#include <memest/shape.hpp>

#include <catch2/catch.hpp>

#include <cstdint>

using namespace memest;

TEST_CASE("a shape's size and its formula come from the same factors", "[shape]") {
  const Shape sh = shape({sym::N, dim("h", 4096)});
  REQUIRE(sh.symbols() == "N*h");
  REQUIRE(sh.values(2, 1000) == "2000 x 4096");
  REQUIRE(sh.elements().at(basis_at(2, 1000)) == 2000ULL * 4096);
  REQUIRE(sh.elements().at(basis_at(3, 7)) == 21ULL * 4096);
  REQUIRE_FALSE(sh.elements().constant());
}

TEST_CASE("scores grow with s^2, SDPA rows with ceil32(s), labels with s+1", "[shape]") {
  const Shape scores = shape({sym::b, dim("a", 32), sym::s2});
  REQUIRE(scores.elements().at(basis_at(2, 100)) == 2ULL * 32 * 100 * 100);
  const Shape lse = shape({sym::b, dim("a", 32), sym::s32});
  REQUIRE(lse.elements().at(basis_at(2, 100)) == 2ULL * 32 * 128);
  REQUIRE(lse.elements().at(basis_at(1, 128)) == 32ULL * 128);
  REQUIRE(lse.values(2, 100) == "2 x 32 x 128");  // the formula multiplies out to the size
  const Shape labels = shape({sym::b, sym::s1});
  REQUIRE(labels.elements().at(basis_at(4, 99)) == 4ULL * 100);
  REQUIRE(shape({}).elements().at(basis_at(5, 5)) == 1);
  REQUIRE(shape({}).symbols() == "1");
}

TEST_CASE("sizes past 2^64 bytes throw instead of wrapping", "[shape]") {
  const Shape big = shape({sym::N, dim("V", 1ULL << 40)});
  REQUIRE_THROWS_AS(big.elements().at(basis_at(1ULL << 20, 1ULL << 10)), Error);
  // b*s^2 = 2^80 at this point: only a size that uses it throws; one without it is exact.
  const Basis x = basis_at(1ULL << 40, 1ULL << 20);
  REQUIRE_THROWS_AS(shape({sym::b, sym::s2}).elements().at(x), Error);
  REQUIRE(shape({sym::N, dim("h", 8)}).elements().at(x) == (1ULL << 63));
  // ceil32(s) rounds s = 2^64 - 1 up past 2^64: beyond, never wrapped to 0.
  REQUIRE_THROWS_AS(shape({sym::b, sym::s32}).elements().at(basis_at(1, UINT64_MAX)), Error);
  Poly p = big.elements();
  REQUIRE_THROWS_AS(p.add(big.elements(), UINT64_MAX), Error);
}

TEST_CASE("a product of two run sizes the basis cannot hold is a programming error", "[shape]") {
  REQUIRE_THROWS_AS(shape({sym::s2, sym::s}).elements(), std::logic_error);
}
