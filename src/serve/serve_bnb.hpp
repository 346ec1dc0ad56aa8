#pragma once
// bitsandbytes' stored bytes of one quantised linear weight, as vLLM and transformers both keep
// it (Params4bit's packed pairs and QuantState, Int8Params' int8 rows and SCB): one layout for
// serve_vllm.cpp and serve_hf.cpp.

#include <cstdint>
#include <string>
#include <vector>

namespace memest {

/// How bitsandbytes holds a linear layer's weight.
struct BnbQuant {
  bool eight = false;             ///< int8 rows with an fp32 SCB each (LLM.int8())
  bool double_quant = true;       ///< 4-bit: the block absmax quantised again (compress_statistics)
  bool pre_quant = false;         ///< a bitsandbytes checkpoint's state (its nested code kept)
  std::vector<std::string> skip;  ///< llm_int8_skip_modules
};

/// Bytes of a weight of `n` elements in `rows` output rows: 8-bit n + 4 x rows; 4-bit
/// ceil(n / 2) packed pairs, the 16-entry fp32 code, and an fp32 absmax per block of 64 or,
/// double-quantised, a byte per block, an fp32 absmax per 256 blocks and an fp32 offset (plus a
/// checkpoint's 256-entry fp32 nested code).
std::uint64_t bnb_bytes(const BnbQuant& b, std::uint64_t rows, std::uint64_t n);

}  // namespace memest
