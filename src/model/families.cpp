// The supported model families, one row each: module names as transformers' modeling_<type>.py
// (v4.55) names them (internlm2 and chatglm from their Hub repositories' remote code), and what
// the step's layer graph was measured on (docs/activations.md, docs/accuracy.md).
#include "model/families.hpp"

#include <algorithm>
#include <array>

namespace memest::detail {
namespace {

// BertModel and RobertaModel.
constexpr ModuleNames kEncoderNames = {
    .embed = "embeddings.word_embeddings",
    .positions = "embeddings.position_embeddings",
    .layer = "encoder.layer.*.",
    .q = "attention.self.query",
    .k = "attention.self.key",
    .v = "attention.self.value",
    .o = "attention.output.dense",
    .norms = {"attention.output.LayerNorm", "output.LayerNorm"},
    .mlp = {"intermediate.gate", "intermediate.dense", "output.dense", "intermediate.dense"},
    .final_norm = "encoder.LayerNorm"};

// A fused query_key_value and dense, h_to_4h and 4h_to_h under "transformer.": BLOOM, Falcon.
constexpr ModuleNames kFusedTransformerNames = {
    .embed = "transformer.word_embeddings",
    .layer = "transformer.h.*.",
    .o = "self_attention.dense",
    .qkv = "self_attention.query_key_value",
    .mlp = {"mlp.dense_gate", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"},
    .final_norm = "transformer.ln_f"};

constexpr ModuleNames with_embed_norm(ModuleNames n, std::string_view embed_norm) {
  n.embed_norm = embed_norm;
  return n;
}
constexpr ModuleNames with_parallel_norms(ModuleNames n, std::string_view attn,
                                          std::string_view mlp) {
  n.parallel_norms = {attn, mlp};
  return n;
}

constexpr std::string_view kAlibi =
    "; ALiBi's position bias is left out and rotary's cos/sin counted instead";

constexpr std::array<ModelFamily, 40> kFamilies = {{
    {.type = "bert", .names = kEncoderNames, .graph = LayerGraph::gpt2},
    {.type = "bloom",
     .names = with_embed_norm(kFusedTransformerNames, "transformer.word_embeddings_layernorm"),
     .graph = LayerGraph::gpt2,
     .approximation = kAlibi},
    {.type = "chatglm",
     .names = {.embed = "transformer.embedding.word_embeddings",
               .layer = "transformer.encoder.layers.*.",
               .o = "self_attention.dense",
               .qkv = "self_attention.query_key_value",
               .mlp = {"mlp.gate", "mlp.up", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"},
               .final_norm = "transformer.encoder.final_layernorm",
               .lm_head = "transformer.output_layer"},
     .graph = std::nullopt},
    {.type = "cohere", .names = {.norms = {"input_layernorm"}}, .graph = LayerGraph::gpt2},
    {.type = "deepseek_v2"},
    {.type = "deepseek_v3"},
    {.type = "falcon",
     .names = with_parallel_norms(kFusedTransformerNames, "ln_attn", "ln_mlp"),
     .graph = LayerGraph::gpt2},
    {.type = "gemma", .norm_fp32_output = true},
    {.type = "gemma2", .norm_fp32_output = true},
    // Gemma 3's multimodal checkpoints: their text_config is read as gemma3_text, whose row
    // the estimate then uses; the vision tower's tensors are src/model/model.cpp's.
    {.type = "gemma3", .norm_fp32_output = true},
    {.type = "gemma3_text", .norm_fp32_output = true},
    {.type = "glm"},
    {.type = "glm4",
     .names = {.norms = {"input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm",
                         "post_mlp_layernorm"}}},
    {.type = "gpt2",
     .names = {.embed = "transformer.wte",
               .positions = "transformer.wpe",
               .layer = "transformer.h.*.",
               .o = "attn.c_proj",
               .qkv = "attn.c_attn",
               .norms = {"ln_1", "ln_2"},
               .mlp = {"mlp.c_gate", "mlp.c_fc", "mlp.c_proj", "mlp.c_fc"},
               .final_norm = "transformer.ln_f"},
     .graph = LayerGraph::gpt2,
     .measured = true},
    {.type = "gpt_neox",
     .names = {.embed = "gpt_neox.embed_in",
               .layer = "gpt_neox.layers.*.",
               .o = "attention.dense",
               .qkv = "attention.query_key_value",
               .mlp = {"mlp.dense_gate", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h",
                       "mlp.dense_h_to_4h"},
               .final_norm = "gpt_neox.final_layer_norm",
               .lm_head = "embed_out"},
     .graph = LayerGraph::gpt2},
    {.type = "gpt_oss",
     .names = {.router = "mlp.router",
               .experts = "mlp.experts.",
               .fused_up = "gate_up_proj",
               .fused_down = "down_proj"},
     .approximation =
         "; the attention sinks and the clamped SwiGLU are taken as plain softmax and SiLU"},
    {.type = "gptj",
     .names = {.embed = "transformer.wte",
               .layer = "transformer.h.*.",
               .q = "attn.q_proj",
               .k = "attn.k_proj",
               .v = "attn.v_proj",
               .o = "attn.out_proj",
               .norms = {"ln_1", "ln_2"},
               .mlp = {"mlp.fc_gate", "mlp.fc_in", "mlp.fc_out", "mlp.fc_in"},
               .final_norm = "transformer.ln_f"},
     .graph = LayerGraph::gpt2},
    {.type = "granite"},
    {.type = "granitemoe",
     .names = {.router = "block_sparse_moe.router.layer", .experts = "block_sparse_moe."}},
    {.type = "internlm2",
     .names = {.embed = "model.tok_embeddings",
               .o = "attention.wo",
               .qkv = "attention.wqkv",
               .norms = {"attention_norm", "ffn_norm"},
               .mlp = {"feed_forward.w1", "feed_forward.w3", "feed_forward.w2", "feed_forward.w13"},
               .lm_head = "output"}},
    {.type = "llama", .measured = true},
    {.type = "mamba"},
    {.type = "megatron_gpt", .graph = std::nullopt},
    {.type = "mistral", .measured = true},
    {.type = "mixtral",
     .names = {.router = "block_sparse_moe.gate",
               .experts = "block_sparse_moe.experts.*.",
               .expert = {"w1", "w3", "w2", "w13"}}},
    {.type = "mpt",
     .names = {.embed = "transformer.wte",
               .layer = "transformer.blocks.*.",
               .o = "attn.out_proj",
               .qkv = "attn.Wqkv",
               .norms = {"norm_1", "norm_2"},
               .mlp = {"ffn.gate_proj", "ffn.up_proj", "ffn.down_proj", "ffn.up_proj"},
               .final_norm = "transformer.norm_f"},
     .graph = LayerGraph::gpt2,
     .approximation = kAlibi},
    {.type = "olmo"},
    {.type = "olmo2",
     .names = {.norms = {"post_attention_layernorm", "post_feedforward_layernorm"}},
     .approximation = "; its norms after attention and the MLP are taken as pre-norms"},
    {.type = "olmoe"},
    {.type = "opt",
     .names = {.embed = "model.decoder.embed_tokens",
               .positions = "model.decoder.embed_positions",
               .project_in = "model.decoder.project_in",
               .project_out = "model.decoder.project_out",
               .layer = "model.decoder.layers.*.",
               .o = "self_attn.out_proj",
               .norms = {"self_attn_layer_norm", "final_layer_norm"},
               .mlp = {"fc_gate", "fc1", "fc2", "fc1"},
               .final_norm = "model.decoder.final_layer_norm"},
     .graph = LayerGraph::gpt2},
    {.type = "phi",
     .names = {.o = "self_attn.dense",
               .q_norm = "self_attn.q_layernorm",
               .k_norm = "self_attn.k_layernorm",
               .mlp = {"mlp.fc_gate", "mlp.fc1", "mlp.fc2", "mlp.fc1"},
               .final_norm = "model.final_layernorm"},
     .graph = LayerGraph::gpt2},
    {.type = "phi3", .dropout_everywhere = true},
    {.type = "qwen2", .measured = true},
    {.type = "qwen2_moe",
     .names = {.shared = {"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
                          "mlp.shared_expert.down_proj", "mlp.shared_expert.gate_up_proj"}}},
    {.type = "qwen3"},
    {.type = "qwen3_moe"},
    {.type = "roberta", .names = kEncoderNames, .graph = LayerGraph::gpt2},
    {.type = "stablelm", .graph = LayerGraph::gpt2},
    {.type = "starcoder2",
     .names = {.mlp = {"mlp.c_gate", "mlp.c_fc", "mlp.c_proj", "mlp.c_fc"}},
     .graph = LayerGraph::gpt2},
    {.type = "t5", .dropout_everywhere = true},
}};

constexpr bool sorted_by_type() {
  for (std::size_t i = 1; i < kFamilies.size(); ++i) {
    if (!(kFamilies[i - 1].type < kFamilies[i].type)) return false;
  }
  return true;
}
static_assert(sorted_by_type(), "kFamilies is sorted by model_type, without repeats");

constexpr ModelFamily kUnlisted = {.graph = std::nullopt};

}  // namespace

std::span<const ModelFamily> model_families() { return kFamilies; }

const ModelFamily& family_of(std::string_view model_type) {
  const auto it =
      std::lower_bound(kFamilies.begin(), kFamilies.end(), model_type,
                       [](const ModelFamily& f, std::string_view type) { return f.type < type; });
  return it != kFamilies.end() && it->type == model_type ? *it : kUnlisted;
}

}  // namespace memest::detail
