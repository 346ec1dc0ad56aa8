#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace memest {

/// Element types of stored tensors. fp8 comes in two layouts (e4m3 for weights and activations,
/// e5m2 for gradients); int4 and nf4 pack two elements in a byte.
enum class Dtype { fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int4, nf4 };

/// Bits per element: 32, 16, 16, 8, 8, 8, 4, 4.
unsigned bits(Dtype dtype);

/// Bytes of `elements` elements, rounded up to a whole byte (4-bit types pack two per byte).
/// Throws Error on overflow.
std::uint64_t bytes_for(Dtype dtype, std::uint64_t elements);

/// Bytes one element takes in a dense tensor of this dtype, at least 1: what a kernel allocates
/// for an activation or a temporary of it (4-bit types are stored packed only as weights).
std::uint64_t width(Dtype dtype);

/// Bytes per element as a number: 4, 2, 2, 1, 1, 1, 0.5, 0.5.
double bytes_per_element(Dtype dtype);
/// The same as the reports write it (fmt's "{}" of the number): "4", "2", "1", "0.5".
std::string_view bytes_per_element_text(Dtype dtype);

/// The config and flag spelling: "fp32", "bf16", "fp8_e4m3", "nf4", ...
std::string_view dtype_name(Dtype dtype);

/// All names accepted by parse_dtype, in display order.
std::span<const std::string_view> dtype_names();

/// Parses a dtype name; also accepts PyTorch spellings ("float32", "bfloat16", "float16").
/// Throws Error listing the accepted names.
Dtype parse_dtype(std::string_view text);

}  // namespace memest
