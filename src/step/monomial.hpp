// Private to the core: a shape's size when it is one monomial, as src/step/shape.cpp computes
// it for Shape::elements, without the polynomial: what sizing a tensor reads (size_tensor).
// Inline, so that sizing a tensor is one loop over its factors without a call.
#pragma once

#include <memest/shape.hpp>
#include <memest/units.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace memest::detail {

/// Where b*s/t sits in the basis (shape.cpp's exponent table gives the order).
inline constexpr std::size_t kMonoNt = 7;

/// The index of b^b s^s ceil32(s)^r in the basis, -1 where it has no such monomial.
inline constexpr std::array<std::array<std::array<int, 2>, 3>, 2> kMonoIndex = {
    {{{{0, -1}, {1, -1}, {2, -1}}}, {{{3, 6}, {4, -1}, {5, -1}}}}};

/// Throws std::logic_error: the basis has no monomial b^b s^s ceil32(s)^r (N/t)^t.
[[noreturn]] void no_monomial(unsigned b, unsigned s, unsigned r, unsigned t);

/// The basis index of b^b s^s ceil32(s)^r (N/t)^t; throws where there is none.
inline std::size_t mono_of(unsigned b, unsigned s, unsigned r, unsigned t = 0) {
  if (t == 1 && b == 0 && s == 0 && r == 0) return kMonoNt;
  const int i = t == 0 && b < 2 && s < 3 && r < 2 ? kMonoIndex[b][s][r] : -1;
  if (i < 0) no_monomial(b, s, r, t);
  return static_cast<std::size_t>(i);
}

/// A shape that is a product of dimensions and one monomial: the monomial's index and its
/// coefficient; index -1 for another shape (one with s + 1).
struct Monomial {
  std::uint64_t coef = 0;
  int index = -1;
};
inline Monomial single_monomial(const Shape& sh) {
  std::uint64_t coef = 1;
  unsigned eb = 0, es = 0, er = 0, et = 0;
  for (std::uint8_t i = 0; i < sh.rank; ++i) {
    const Sym& f = sh.factors[i];
    if (f.plus_one) return {};
    coef = checked_mul(coef, f.value);
    eb += f.eb;
    es += f.es;
    er += f.er;
    et += f.et;
  }
  return {coef, static_cast<int>(mono_of(eb, es, er, et))};
}

}  // namespace memest::detail
