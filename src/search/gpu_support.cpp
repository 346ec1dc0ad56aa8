// What a run asks of its GPU that the GPU does not have (issue 23): bf16 and fp8 arithmetic,
// FlashAttention's kernels. Remedies skip such changes; a plain estimate warns.
#include <memest/gpu_support.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

// The dtypes the run computes or keeps in: the policy's every category.
std::vector<Dtype> dtypes_of(const PrecisionPolicy& p) {
  std::vector<Dtype> out = {p.param, p.grad, p.state, p.activation};
  for (const auto& d : {p.working, p.master, p.grad_accum}) {
    if (d) out.push_back(*d);
  }
  return out;
}

std::string architecture(const Gpu& gpu) {
  return gpu.sm ? fmt::format(" (compute capability {}.{})", gpu.sm / 10, gpu.sm % 10) : "";
}

}  // namespace

GpuSupport gpu_support(const Gpu& gpu) {
  if (gpu.sm > 0) {  // NVIDIA: bf16 and FlashAttention 2 from Ampere, fp8 from Ada and Hopper
    return {gpu.sm >= 80, gpu.sm >= 89, gpu.sm >= kFlashAttentionMinSm};
  }
  // AMD CDNA2 (MI250X) has bf16 but no fp8, CDNA3 (MI300X) both; Gaudi 2 and 3 have both. Each
  // has a fused attention kernel (ROCm's FlashAttention port, Gaudi's FusedSDPA).
  return {true, gpu.name != "mi250x", true};
}

const Gpu* budget_gpu(const Budget& budget) {
  if (!budget.preset) return nullptr;
  const auto& all = gpu_presets();
  const auto it =
      std::find_if(all.begin(), all.end(), [&](const Gpu& g) { return g.name == budget.source; });
  return it == all.end() ? nullptr : &*it;
}

std::vector<std::string> unsupported_features(const RunSpec& run, const Budget& budget) {
  std::vector<std::string> out;
  const Gpu* gpu = budget_gpu(budget);
  if (!gpu) return out;
  const GpuSupport has = gpu_support(*gpu);
  const auto dtypes = dtypes_of(run.precision);
  const auto uses = [&](std::initializer_list<Dtype> any) {
    return std::any_of(dtypes.begin(), dtypes.end(),
                       [&](Dtype d) { return std::find(any.begin(), any.end(), d) != any.end(); });
  };
  if (!has.bf16 && uses({Dtype::bf16})) {
    out.push_back(
        fmt::format("{} has no bf16 arithmetic{}: bf16 needs an A100-class GPU (8.0) "
                    "or later; fp16 with loss scaling (amp, mixed) runs there",
                    gpu->name, architecture(*gpu)));
  }
  if (!has.fp8 && uses({Dtype::fp8_e4m3, Dtype::fp8_e5m2})) {
    out.push_back(
        fmt::format("{} has no fp8 arithmetic{}: fp8 needs an Ada or Hopper GPU (8.9) "
                    "or later",
                    gpu->name, architecture(*gpu)));
  }
  if (!has.flash_attention && run.training.attention == Attention::flash) {
    out.push_back(fmt::format(
        "{} cannot run FlashAttention 2{}: it needs compute capability "
        "{}.{} or later; --attention sdpa uses PyTorch's memory-efficient "
        "kernel there",
        gpu->name, architecture(*gpu), kFlashAttentionMinSm / 10, kFlashAttentionMinSm % 10));
  }
  return out;
}

}  // namespace memest
