// Sizes as polynomials in the micro-batch and the sequence length (docs/design.md, "The step
// as data"): what lets a compiled plan evaluate a whole step with a few multiply-adds.
#include "step/monomial.hpp"

#include <memest/error.hpp>
#include <memest/shape.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace memest {
namespace {

struct Exps {
  std::uint8_t b, s, r, t;
};
// Monomial i is b^eb s^es ceil32(s)^er, or (b*s/t)^et.
constexpr std::array<Exps, kMonoCount> kExps = {{{0, 0, 0, 0},
                                                 {0, 1, 0, 0},
                                                 {0, 2, 0, 0},
                                                 {1, 0, 0, 0},
                                                 {1, 1, 0, 0},
                                                 {1, 2, 0, 0},
                                                 {1, 0, 1, 0},
                                                 {0, 0, 0, 1}}};
static_assert(kExps[detail::kMonoNt].t == 1);
static_assert(kExps[kMonoS].s == 1 && kExps[kMonoS].b == 0 && kExps[kMonoB].b == 1 &&
              kExps[kMonoB].s == 0 && kExps[kMonoBS].b == 1 && kExps[kMonoBS].s == 1);
static_assert(kExps[6].b == 1 && kExps[6].r == 1 && kExps[2].s == 2 && kExps[5].s == 2);

// p x (a run size): every monomial's exponents shift; s+1 also keeps p itself.
Poly times_run(const Poly& p, const Sym& f) {
  Poly out;
  for (std::size_t i = 0; i < kMonoCount; ++i) {
    if (p.c[i] == 0) continue;
    const auto& e = kExps[i];
    out.c[detail::mono_of(e.b + f.eb, e.s + f.es, e.r + f.er, e.t + f.et)] += p.c[i];
  }
  if (f.plus_one) out.add(p);
  return out;
}

std::uint64_t value_at(const Sym& f, std::uint64_t b, std::uint64_t s, std::uint64_t t) {
  if (!f.run()) return f.value;
  if (f.et) return checked_mul(b, ceil_div(s, t));
  if (f.er) return checked_mul(ceil_div(s, 32), 32);
  std::uint64_t v = f.eb ? b : 1;
  for (unsigned i = 0; i < f.es; ++i) v = checked_mul(v, s);
  return f.plus_one ? checked_add(v, 1) : v;
}

// a * b, or kBeyond when it does not fit.
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kBeyond : r;
}

}  // namespace

Basis basis_at(std::uint64_t b, std::uint64_t s, std::uint64_t t) {
  // A monomial past 2^64 matters only to a size that uses it: Poly::at throws then, and a plan
  // without s^2 terms still evaluates at s = 2^32.
  const std::uint64_t s2 = saturating_mul(s, s);
  const std::uint64_t s32 = saturating_mul(ceil_div(s, 32), 32);
  return {1,
          s,
          s2,
          b,
          saturating_mul(b, s),
          saturating_mul(b, s2),
          saturating_mul(b, s32),
          saturating_mul(b, ceil_div(s, std::max<std::uint64_t>(1, t)))};
}

bool Poly::constant() const {
  for (std::size_t i = 1; i < kMonoCount; ++i) {
    if (c[i] != 0) return false;
  }
  return true;
}

void Poly::overflow() { throw_size_overflow(); }

namespace detail {

void no_monomial(unsigned b, unsigned s, unsigned r, unsigned t) {
  throw std::logic_error(
      fmt::format("shape: no monomial b^{} s^{} ceil32(s)^{} (N/t)^{}", b, s, r, t));
}

}  // namespace detail

Poly Shape::elements() const {
  Poly p;
  // Most shapes are a product of dimensions and one monomial.
  if (const detail::Monomial m = detail::single_monomial(*this); m.index >= 0) {
    p.c[static_cast<std::size_t>(m.index)] = m.coef;
    return p;
  }
  p.c[0] = 1;
  for (std::uint8_t i = 0; i < rank; ++i) {
    const Sym& f = factors[i];
    if (f.run()) {
      p = times_run(p, f);
    } else {
      for (auto& x : p.c) x = checked_mul(x, f.value);
    }
  }
  return p;
}

std::string Shape::symbols() const {
  if (rank == 0) return "1";
  std::string out = factors[0].name;
  for (std::uint8_t i = 1; i < rank; ++i)
    fmt::format_to(std::back_inserter(out), "*{}", factors[i].name);
  return out;
}

std::string Shape::values(std::uint64_t b, std::uint64_t s, std::uint64_t t) const {
  if (rank == 0) return "1";
  std::string out = std::to_string(value_at(factors[0], b, s, t));
  for (std::uint8_t i = 1; i < rank; ++i)
    fmt::format_to(std::back_inserter(out), " x {}", value_at(factors[i], b, s, t));
  return out;
}

void Shape::too_many_factors() { throw std::logic_error("shape: more than five factors"); }

}  // namespace memest
