#pragma once
// What a GPU preset computes natively, beside its memory (include/memest/hardware.hpp), and
// what a run asks of it: the advice of `fit` and the warnings of an estimate (issue 23).

#include <memest/hardware.hpp>
#include <memest/run_spec.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memest {

/// FlashAttention 2's minimum CUDA architecture, compute capability x 10.
inline constexpr std::uint32_t kFlashAttentionMinSm = 80;

/// What a GPU supports: bf16 arithmetic (NVIDIA from Ampere, sm 80), fp8 (from Ada and Hopper,
/// sm 89) and FlashAttention's kernels (FlashAttention 2 needs sm 80; ROCm and Gaudi have their
/// own fused attention).
struct GpuSupport {
  bool bf16 = false;
  bool fp8 = false;
  bool flash_attention = false;
};

/// The support of a preset of gpu_presets(): from its compute capability for NVIDIA parts, from
/// the vendor's documentation for the others.
GpuSupport gpu_support(const Gpu& gpu);

/// The GPU preset of a budget (--gpu NAME), or nullptr for a --budget size.
const Gpu* budget_gpu(const Budget& budget);

/// What `run` asks of the GPU of `budget` that it does not have, one sentence each (bf16 or
/// fp8 arithmetic, FlashAttention's kernels); empty for a --budget size or a GPU that has all.
std::vector<std::string> unsupported_features(const RunSpec& run, const Budget& budget);

}  // namespace memest
