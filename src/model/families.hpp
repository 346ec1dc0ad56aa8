// Private to the core: one row per supported model_type, stating what memest knows of the family
// beyond its config.json (src/model/families.cpp): its Hugging Face module names, and how far
// the layer graph of the step was measured on it. The config readers, one per row, are in
// src/input/hf_families.cpp.
#pragma once

#include <memest/model.hpp>

#include <array>
#include <optional>
#include <span>
#include <string_view>

namespace memest::detail {

/// Module names of one MLP, relative to the layer (or to one expert).
struct MlpNames {
  std::string_view gate, up, down, gate_up;
};

/// A family's Hugging Face module names (transformers models/<type>/modeling_<type>.py). Only
/// names: every shape comes from Architecture fields, so a family without names of its own gets
/// the right counts under these, Llama's. Layer names are relative to `layer`.
struct ModuleNames {
  std::string_view embed = "model.embed_tokens";
  std::string_view positions = "model.embed_positions";
  std::string_view token_types = "embeddings.token_type_embeddings";
  std::string_view embed_norm = "embeddings.LayerNorm";
  std::string_view project_in = "model.project_in";
  std::string_view project_out = "model.project_out";
  std::string_view layer = "model.layers.*.";
  std::string_view q = "self_attn.q_proj", k = "self_attn.k_proj", v = "self_attn.v_proj";
  std::string_view o = "self_attn.o_proj", qkv = "self_attn.qkv_proj";
  std::string_view q_norm = "self_attn.q_norm", k_norm = "self_attn.k_norm";
  /// The norms of a layer in order; a layer with more gets "norm_<i>" for the rest.
  std::array<std::string_view, 4> norms = {"input_layernorm", "post_attention_layernorm",
                                           "pre_feedforward_layernorm",
                                           "post_feedforward_layernorm"};
  /// The two norms of a parallel block that has two, when they have names of their own.
  std::array<std::string_view, 4> parallel_norms = {};
  MlpNames mlp = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_up_proj"};
  std::string_view router = "mlp.gate";
  std::string_view experts = "mlp.experts.*.";
  MlpNames expert = {"gate_proj", "up_proj", "down_proj", "gate_up_proj"};
  /// Experts as 3-D parameters (Architecture::fused_experts): the up and the down tensor.
  std::string_view fused_up = "input_linear.weight", fused_down = "output_linear.weight";
  MlpNames shared = {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
                     "mlp.shared_experts.down_proj", "mlp.shared_experts.gate_up_proj"};
  std::string_view shared_gate = "mlp.shared_expert_gate";
  std::string_view final_norm = "model.norm";
  std::string_view lm_head = "lm_head";
  std::string_view pooler = "pooler.dense";
};

/// Everything memest states of one model_type besides reading its config.
struct ModelFamily {
  std::string_view type;  ///< the model_type, as config.json spells it
  ModuleNames names;
  /// The layer graph its activations follow (docs/activations.md): Llama's for an RMSNorm
  /// family, GPT-2's for a LayerNorm one; none where the config chooses the norm (chatglm's
  /// "rmsnorm", megatron_gpt's "normalization") or for a model_type without a row, which then
  /// follow their norm (ActivationInputs::graph).
  std::optional<LayerGraph> graph = LayerGraph::llama;
  /// The layer graph of the step was measured on this family (docs/accuracy.md); the others
  /// follow it by approximation and say so.
  bool measured = false;
  /// What the layer graph leaves out for this family, beyond the general approximations of
  /// docs/activations.md: "; <what>", appended to the assumption; empty when nothing.
  std::string_view approximation;
  /// --dropout applies at every dropout site the family has (attention, residual, embedding),
  /// as in every GPT-2-graph family; the other Llama-graph families have it on attention only.
  bool dropout_everywhere = false;
  /// Its RMSNorm computes output * (1 + weight) in fp32 and casts the product back (Gemma's
  /// GemmaRMSNorm.forward), so what it keeps for backward is fp32.
  bool norm_fp32_output = false;
};

/// Every supported model_type's row, sorted by type.
std::span<const ModelFamily> model_families();

/// The row of `model_type`; for a type without one (an Architecture made by hand), a row with
/// Llama's names that is not measured.
const ModelFamily& family_of(std::string_view model_type);

}  // namespace memest::detail
