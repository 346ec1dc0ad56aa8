#pragma once
// Private to src/serve: ggml's types and their block sizes, stated once for the GGUF reader, the
// weights' types (src/serve/serve_gguf.cpp) and the KV cache's (src/serve/serve_llama_cpp.cpp).

#include <memest/serve.hpp>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string_view>

namespace memest {

/// A ggml type as a GGUF file names it: its id and its traits.
struct GgufTypeTraits {
  std::uint32_t id;
  std::string_view name;
  std::uint64_t block;  ///< elements per block
  std::uint64_t bytes;  ///< bytes per block
};

/// data table: ggml_type and its type traits (ggml/src/ggml.c: type_name, blck_size, type_size);
/// the ids a GGUF file may hold, the retired ones (4, 5, 31-33, 36-38) left out; 137-141 are
/// ik_llama.cpp's iq2_k to iq6_k (ggml/include/ggml.h and ggml/src/ggml-common.h at 5236c98b).
inline constexpr std::array<GgufTypeTraits, 37> kGgmlTypes = {{
    {0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
    {3, "q4_1", 32, 20},      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
    {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},
    {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
    {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66},
    {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
    {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
    {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
    {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},
    {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
    {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17},    {137, "iq2_k", 256, 76},
    {138, "iq3_k", 256, 110}, {139, "iq4_k", 256, 144}, {140, "iq5_k", 256, 176},
    {141, "iq6_k", 256, 212},
}};

/// The traits of the ggml type `name`, for the tables of the types a use accepts: a name not in
/// kGgmlTypes fails to compile where the table is built at compile time.
constexpr GgmlType ggml_traits(std::string_view name) {
  for (const GgufTypeTraits& t : kGgmlTypes) {
    if (t.name == name) return GgmlType{t.name, t.block, t.bytes};
  }
  throw std::invalid_argument("not a ggml type");  // at compile time: a compile error
}

}  // namespace memest
