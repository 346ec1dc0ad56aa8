// Private to the core: a shape's size when it is one monomial, as src/step/shape.cpp computes
// it for Shape::elements, without the polynomial: what sizing a tensor reads (size_tensor).
#pragma once

#include <cstdint>

namespace memest {
struct Shape;
namespace detail {

/// A shape that is a product of dimensions and one monomial: the monomial's index and its
/// coefficient; index -1 for another shape (one with s + 1). Defined in shape.cpp.
struct Monomial {
  std::uint64_t coef = 0;
  int index = -1;
};
Monomial single_monomial(const Shape& sh);

}  // namespace detail
}  // namespace memest
