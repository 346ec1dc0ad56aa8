// QLoRA's base weights quantised on the device as the model is built: torchtune's LoRALinear
// creates an nn.Linear on the device in the run's dtype and calls torchao's to_nf4 on its
// weight (torchtune/modules/peft/lora.py, _create_weight_and_bias, read at 0914d5cfb), so every
// quantised weight passes through NF4Tensor.from_tensor (torchao/dtypes/nf4tensor.py: v0.1 at
// a7670be58 quantises the whole weight at once; from v0.2, 6081796bc, 2^20 elements at a time).
//
// The weight is a Parameter, so the ops run under autograd: abs() keeps its input for
// backward, which is why both the difference and its absolute value are live at once.
// Tensors of one value per 64-element block (the absmax scalers and their indices) are left
// out: they are 1/64 of the weight's elements.
#include "nf4_init.hpp"

#include <algorithm>

namespace memest::detail {
namespace {

using u64 = std::uint64_t;

/// torchao's CHUNK_SIZE: elements quantised per pass from v0.2 on.
constexpr u64 kChunk = 1ULL << 20;
/// The 16 NF4 code values every element is compared with (quantize_tensor_nearest).
constexpr u64 kCodes = 16;

enum Slot : std::uint32_t {
  data,
  absmax,
  scaled,
  diff,
  diff_abs,
  min_values,
  indices,
  shifted,
  codes,
  chunk_codes
};
static_assert(data == kNf4Data && chunk_codes < kNf4Slots);

struct Sequence {
  std::vector<AllocEvent> events;
  void alloc(Slot s, u64 bytes) { events.push_back({s, bytes}); }
  void free(Slot s) { events.push_back({s, 0}); }
};

// quantize_tensor_nearest on `n` bf16 values: (value.unsqueeze(-1) - nf4).abs() is n x 16
// bf16 twice over (abs keeps its input), then min(dim=-1) gives bf16 values and int64
// indices; the values go with the expression, the differences when the function returns.
void nearest_code(Sequence& s, u64 n) {
  s.alloc(diff, 2 * kCodes * n);
  s.alloc(diff_abs, 2 * kCodes * n);
  s.alloc(min_values, 2 * n);
  s.alloc(indices, 8 * n);
  s.free(min_values);
  s.free(diff_abs);
  s.free(diff);
}

// torchao 0.1: the int64 indices of every element, packed two per byte:
// (q[::2] << 4 | q[1::2]).to(uint8), each step an int64 tensor of n/2 elements.
void whole(Sequence& s, u64 n) {
  nearest_code(s, n);
  s.alloc(shifted, 8 * (n / 2));
  s.alloc(codes, 8 * (n / 2));
  s.free(shifted);
  s.alloc(data, n / 2);
  s.free(codes);
  s.free(indices);
}

// torchao >= 0.2: a uint8 code per element, filled a chunk at a time (each chunk's indices
// cast to uint8), then packed in uint8. After a full chunk every block it took is free again
// and merged back, so the allocator is where it was: one full chunk and the last stand for all.
void chunked(Sequence& s, u64 n) {
  s.alloc(codes, n);
  const u64 full = n / kChunk;
  const u64 last = n % kChunk;
  for (const u64 c : {full > 0 ? kChunk : 0, last}) {
    if (c == 0) continue;
    nearest_code(s, c);
    s.alloc(chunk_codes, c);
    s.free(chunk_codes);
    s.free(indices);
  }
  s.alloc(shifted, n / 2);
  s.alloc(data, n / 2);
  s.free(shifted);
  s.free(codes);
}

}  // namespace

std::vector<AllocEvent> nf4_quantisation(u64 n, QloraInit how) {
  Sequence s;
  // double_quantize_scalers, then convert_to_norm_float_weight: each takes blocks.abs() (a
  // bf16 copy of the weight) for its absmax; then the weight divided by its block's scale.
  for (int pass = 0; pass < 2; ++pass) {
    s.alloc(absmax, 2 * n);
    s.free(absmax);
  }
  s.alloc(scaled, 2 * n);
  if (how == QloraInit::chunked) {
    chunked(s, n);
  } else {
    whole(s, n);
  }
  s.free(scaled);
  return s.events;
}

}  // namespace memest::detail
