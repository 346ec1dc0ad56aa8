#include "base/names.hpp"

#include <memest/dtype.hpp>
#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace memest {
namespace {

constexpr std::array<std::string_view, 8> kDtypeNames = {"fp32",     "fp16", "bf16", "fp8_e4m3",
                                                         "fp8_e5m2", "int8", "int4", "nf4"};
constexpr std::array<unsigned, 8> kBits = {32, 16, 16, 8, 8, 8, 4, 4};

constexpr std::array<std::pair<std::string_view, Dtype>, 5> kDtypeAliases = {{
    {"float32", Dtype::fp32},
    {"float16", Dtype::fp16},
    {"bfloat16", Dtype::bf16},
    {"float8_e4m3fn", Dtype::fp8_e4m3},
    {"float8_e5m2", Dtype::fp8_e5m2},
}};

std::size_t index(Dtype d) { return static_cast<std::size_t>(d); }

}  // namespace

unsigned bits(Dtype dtype) { return kBits[index(dtype)]; }

std::uint64_t bytes_for(Dtype dtype, std::uint64_t elements) {
  return ceil_div(checked_mul(elements, bits(dtype)), 8);
}

std::uint64_t width(Dtype dtype) { return std::max<std::uint64_t>(1, bits(dtype) / 8); }

double bytes_per_element(Dtype dtype) { return bits(dtype) / 8.0; }

std::string_view bytes_per_element_text(Dtype dtype) {
  switch (bits(dtype)) {  // no float formatting for the whole widths
    case 32:
      return "4";
    case 16:
      return "2";
    case 8:
      return "1";
    default:
      return "0.5";
  }
}

std::string_view dtype_name(Dtype dtype) { return kDtypeNames[index(dtype)]; }

std::span<const std::string_view> dtype_names() { return kDtypeNames; }

Dtype parse_dtype(std::string_view text) {
  return detail::parse_enum<Dtype>(kDtypeNames, text, "dtype", kDtypeAliases);
}

}  // namespace memest
