// bitsandbytes' stored bytes of one weight (bitsandbytes/functional.py quantize_4bit with
// blocksize 64 and QuantState; nn/modules.py Int8Params), read as serve_vllm.cpp's comment on
// bnb_quant says; transformers' Linear4bit and Linear8bitLt hold the same Params4bit and
// Int8Params.
#include "serve/serve_bnb.hpp"

#include <memest/units.hpp>

namespace memest {

std::uint64_t bnb_bytes(const BnbQuant& b, std::uint64_t rows, std::uint64_t n) {
  if (b.eight) return checked_add(n, checked_mul(4, rows));
  const u64 blocks = ceil_div(n, 64);
  const u64 packed = checked_add(ceil_div(n, 2), u64{16} * 4);
  if (!b.double_quant) return checked_add(packed, checked_mul(4, blocks));
  const u64 nested = blocks + 4 * ceil_div(blocks, 256) + 4 + (b.pre_quant ? u64{256} * 4 : 0);
  return checked_add(packed, nested);
}

}  // namespace memest
