// Appending a record built where it lies in its vector.
#pragma once

#include <utility>
#include <vector>

namespace memest::detail {

/// Appends to `v` the aggregate of `fields`, built in place (C++20's parenthesised aggregate
/// initialisation): no temporary written field by field and then read back whole, a read the
/// CPU cannot forward from the narrower stores still in flight (docs/performance.md, "Wall
/// time"). Where the compiler lacks it (clang 14: the web build's and clang-tidy's), a braced
/// temporary is moved in: the same record.
template <typename T, typename... Fields>
T& emplace_fields(std::vector<T>& v, Fields&&... fields) {
#if defined(__cpp_aggregate_paren_init) && __cpp_aggregate_paren_init >= 201902L
  return v.emplace_back(std::forward<Fields>(fields)...);
#else
  return v.emplace_back(T{std::forward<Fields>(fields)...});
#endif
}

}  // namespace memest::detail
