#pragma once

#include <memest/model.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// Freezes (trainable = false) every group whose role is in `roles`. Frozen tensors keep their
/// stored bytes but get no gradients and no optimizer state.
void freeze_roles(Inventory& inventory, std::span<const Role> roles);

/// A LoRA (Hu et al. 2021) or QLoRA (Dettmers et al. 2023) fine-tuning setup.
struct LoraSpec {
  std::uint64_t rank = 0;            ///< r: A is r x in, B is out x r
  std::vector<std::string> targets;  ///< q, k, v, o, gate, up, down, or all-linear
  bool qlora = false;                ///< base matmul weights stored as 4-bit NF4
  bool double_quant = false;         ///< QLoRA double quantization of the absmax constants
  /// The adapters' own dtype (PEFT's fp32 upcast); none: the parameters' dtype.
  std::optional<Dtype> adapter_dtype;
};

/// The names LoraSpec::targets accepts, in display order.
std::span<const std::string_view> lora_target_names();

/// Elements per QLoRA quantization block: one absmax constant per 64 weights (Dettmers et al.
/// 2023, sec. 3); with double quantization the 8-bit absmax values are themselves quantized in
/// blocks of 256 with one fp32 constant each.
inline constexpr std::uint64_t kNf4BlockSize = 64;
/// Absmax constants per second-level block under double quantization.
inline constexpr std::uint64_t kDoubleQuantBlockSize = 256;

/// Applies LoRA to a model with a known architecture: freezes the whole base model and adds
/// trainable groups `<module>.lora_A.weight` (r x in) and `<module>.lora_B.weight` (out x r)
/// for each targeted module (role adapter, matmul). A target names the projection's job, so it
/// works across families: q/k/v/o the attention projections, gate/up/down the MLP ones (dense,
/// shared and routed experts alike); a fused module (GPT-2 c_attn, NeoX/Falcon query_key_value,
/// Phi-3 qkv_proj and gate_up_proj, DeepSeek's kv projections) is adapted once, at its full
/// width, when any of its parts is targeted, as PEFT does when given the module's name.
/// all-linear targets every Linear except the lm_head (PEFT's rule).
/// With qlora, every base matmul weight except the lm_head (what bitsandbytes' 4-bit loading
/// quantizes) is stored as nf4 plus quant_state groups: fp32 absmax per 64 weights (0.5
/// bit/param), or with double_quant an 8-bit absmax per 64 weights and an fp32 constant per 256
/// of those (8/64 + 32/(64*256) = 0.127 bit/param; Dettmers et al. 2023, sec. 3). The paper's
/// figures: the per-tensor offset and the 256-entry code tables (about 1 KiB) are left out.
/// Throws Error for a rank of 0, an unknown target (listing the accepted names), targets that
/// match no module, or a model known only by its parameter count.
void apply_lora(ModelSpec& model, const LoraSpec& spec);

/// QLoRA's base for a model that already has LoRA adapters: every frozen Linear but the output
/// layer stored as NF4 with its quantization constants, as apply_lora with `qlora` stores it.
void quantize_frozen_base(ModelSpec& model, bool double_quant);

}  // namespace memest
