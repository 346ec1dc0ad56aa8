#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace memest {

/// The monomials in the micro-batch b and the sequence length s that tensor sizes are made of:
/// 1, s, s^2, b, b*s, b*s^2, b*ceil32(s) (SDPA's log-sum-exp rows, padded to 32) and b*s/t (the
/// tokens of one rank where sequence parallelism splits them over t tensor-parallel ranks).
inline constexpr std::size_t kMonoCount = 8;

/// Where b, s and b*s sit in the basis (the order shape.cpp's exponent table gives).
inline constexpr std::size_t kMonoS = 1, kMonoB = 3, kMonoBS = 4;

/// The value of each monomial at one (b, s) point.
using Basis = std::array<std::uint64_t, kMonoCount>;

/// A monomial's value when it passes 2^64 - 2: Poly::at throws for a size that uses it.
inline constexpr std::uint64_t kBeyond = UINT64_MAX;

/// The monomials at (b, s), with s split `t` ways for b*s/t (rounded up); each kBeyond past
/// 2^64 - 2.
Basis basis_at(std::uint64_t b, std::uint64_t s, std::uint64_t t = 1);

/// A size as a polynomial in b and s: one coefficient per monomial.
struct Poly {
  std::array<std::uint64_t, kMonoCount> c{};

  /// Takes away what an earlier add() put in (never below zero: that is a programming error).
  void subtract(const Poly& other) {
    for (std::size_t i = 0; i < kMonoCount; ++i) c[i] -= other.c[i];
  }
  /// Adds k x other (checked: throws Error on overflow).
  void add(const Poly& other, std::uint64_t k = 1) {
    for (std::size_t i = 0; i < kMonoCount; ++i) {
      std::uint64_t m = 0;
      if (__builtin_mul_overflow(other.c[i], k, &m) || __builtin_add_overflow(c[i], m, &c[i]))
        overflow();
    }
  }
  /// Whether the size does not depend on b or s.
  bool constant() const;
  /// The value at a point (checked: throws Error on overflow).
  std::uint64_t at(const Basis& x) const {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < kMonoCount; ++i) {
      std::uint64_t m = 0;
      if (__builtin_mul_overflow(c[i], x[i], &m) || __builtin_add_overflow(sum, m, &sum) ||
          (x[i] == kBeyond && c[i] != 0))
        overflow();
    }
    return sum;
  }

 private:
  [[noreturn]] static void overflow();
};

/// One factor of a shape: a model dimension (h = 4096), a count (3 projections) or a run size
/// (b, s, N = b*s, s^2, ceil32(s), s+1, N/t). Run sizes carry exponents of b, s, ceil32(s) and
/// b*s/t.
struct Sym {
  /// Zero when unset (a shape's unused factors: a Shape is all zeros until it has factors).
  const char* name = nullptr;
  std::uint64_t value = 0;  ///< model dimensions and counts; 1 for run sizes
  std::uint8_t eb = 0, es = 0, er = 0;
  bool plus_one = false;  ///< s + 1
  std::uint8_t et = 0;    ///< b*s/t: the tokens of one sequence-parallel rank
  bool run() const { return eb || es || er || et; }
};

/// The run sizes, by name.
namespace sym {
inline constexpr Sym b{"b", 1, 1, 0, 0, false};
inline constexpr Sym s{"s", 1, 0, 1, 0, false};
inline constexpr Sym N{"N", 1, 1, 1, 0, false};
inline constexpr Sym s2{"s^2", 1, 0, 2, 0, false};
inline constexpr Sym s32{"ceil32(s)", 1, 0, 0, 1, false};
inline constexpr Sym s1{"(s+1)", 1, 0, 1, 0, true};
inline constexpr Sym Nt{"N/t", 1, 0, 0, 0, false, 1};
}  // namespace sym

/// A model dimension or a count (`name` a string literal).
constexpr Sym dim(const char* name, std::uint64_t value) { return Sym{name, value}; }

/// A tensor's elements: the product of up to five factors. Its size (a Poly) and its formula
/// (the symbols, and their values at a point) come from the same factors.
struct Shape {
  std::array<Sym, 5> factors;
  std::uint8_t rank = 0;

  Poly elements() const;
  /// "N*h", "b*a*s^2"; "1" for a scalar.
  std::string symbols() const;
  /// "2048 x 4096": each factor's value at (b, s), s split t ways for N/t.
  std::string values(std::uint64_t b, std::uint64_t s, std::uint64_t t = 1) const;
  /// shape()'s error: more factors than a Shape holds.
  [[noreturn]] static void too_many_factors();
};

/// A shape from its factors; throws std::logic_error past five factors. Inline, so that each
/// call writes its factors straight into the shape (docs/performance.md, "Wall time").
inline Shape shape(std::initializer_list<Sym> factors) {
  Shape sh;
  if (factors.size() > sh.factors.size()) Shape::too_many_factors();
  std::size_t i = 0;
  for (const Sym& f : factors) sh.factors[i++] = f;  // the rest stay zero
  sh.rank = static_cast<std::uint8_t>(factors.size());
  return sh;
}

}  // namespace memest
