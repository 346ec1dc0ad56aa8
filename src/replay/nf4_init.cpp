// QLoRA's base weights quantised on the device as the model is built: torchtune's LoRALinear
// creates an nn.Linear on the device in the run's dtype and calls torchao's to_nf4 on its
// weight (torchtune/modules/peft/lora.py, _create_weight_and_bias, read at 0914d5cfb), so every
// quantised weight passes through NF4Tensor.from_tensor (torchao/dtypes/nf4tensor.py: v0.1 at
// a7670be58 quantises the whole weight at once; from v0.2, 6081796bc, 2^20 elements at a time).
//
// from_tensor runs under torch.no_grad(): each intermediate goes as soon as nothing refers to
// it. Tensors of one value per 64-element block (the absmax scalers and their indices) are left
// out: they are 1/64 of the weight's elements.
#include "nf4_init.hpp"

#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {
namespace {

/// torchao's CHUNK_SIZE: elements quantised per pass from v0.2 on.
constexpr u64 kChunk = 1ULL << 20;
/// The 16 NF4 code values every element is compared with (quantize_tensor_nearest).
constexpr u64 kCodes = 16;

enum Nf4Slot : std::uint32_t {
  data,
  original,
  absmax,
  scaled,
  diff,
  diff_abs,
  min_values,
  indices,
  shifted,
  codes,
  chunk_codes,
  nibbles,
  first_codes,
  second_codes,
  first_values,
  second_values,
  repeated,
  first_scaled,
  second_scaled
};
static_assert(data == kNf4Data && original == kNf4Original && second_scaled < kNf4Slots);

struct Sequence {
  std::vector<AllocEvent> events;
  void alloc(Nf4Slot s, u64 bytes) { events.push_back({s, bytes}); }
  void free(Nf4Slot s) { events.push_back({s, 0}); }
};

// quantize_tensor_nearest on `n` bf16 values: (value.unsqueeze(-1) - nf4) is n x 16 bf16,
// freed once abs() has its n x 16 result; min(dim=-1) gives bf16 values and int64 indices;
// the values go with the expression, the absolute differences when the function returns.
void nearest_code(Sequence& s, u64 n) {
  s.alloc(diff, 2 * kCodes * n);
  s.alloc(diff_abs, 2 * kCodes * n);
  s.free(diff);
  s.alloc(min_values, 2 * n);
  s.alloc(indices, 8 * n);
  s.free(min_values);
  s.free(diff_abs);
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

// get_original_weight (torchao/dtypes/nf4tensor.py, a7670be58): each half of the packed codes
// (a uint8 shift or mask, then int64), looked up in bf16, scaled by its block's scaler repeated
// (flatten() of an expand copies it), then stacked into the bf16 weight. Its locals go when it
// returns.
std::vector<AllocEvent> nf4_dequantisation(u64 n) {
  Sequence s;
  const u64 half = (n + 1) / 2;
  for (const Nf4Slot codes_of_half : {first_codes, second_codes}) {
    s.alloc(nibbles, half);
    s.alloc(codes_of_half, 8 * half);
    s.free(nibbles);
  }
  s.alloc(first_values, 2 * half);
  s.alloc(second_values, 2 * half);
  for (const Nf4Slot scaled_half : {first_scaled, second_scaled}) {
    s.alloc(repeated, 2 * half);
    s.alloc(scaled_half, 2 * half);
    s.free(repeated);
  }
  s.alloc(original, 2 * n);
  for (const Nf4Slot local :
       {first_codes, second_codes, first_values, second_values, first_scaled, second_scaled})
    s.free(local);
  return s.events;
}

}  // namespace memest::detail
