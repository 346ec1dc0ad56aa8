// The config.json readers, one per model_type: which keys size the model and the defaults of
// the transformers config class when a key is absent. Each reader fills an Architecture; the
// parameter layout that follows from it is in model.cpp. Layouts were read in transformers
// models/<type>/configuration_<type>.py and modeling_<type>.py (v4.55; gpt_oss, qwen3 and
// gemma3 as added in 4.51-4.55), internlm2 and chatglm in the remote code of their Hub repositories
// (modeling_internlm2.py, modeling_chatglm.py); docs/models.md has the table.
#include "input/hf_families.hpp"

#include <memest/hf_config.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>

namespace memest::detail {
namespace {

// The keys every Llama-style decoder shares.
void read_decoder(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_hidden_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.num_kv_heads = r.uint({"num_key_value_heads"}, a.num_heads);
  a.head_dim = r.uint({"head_dim"}, 0);
  a.intermediate_size = r.required({"intermediate_size"});
  a.gated_mlp = true;
  a.rms_norm = true;
  a.norms_per_layer = 2;
  a.activation = r.string({"hidden_act"}, "silu");
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, false);
}

// Megatron-core's GPTModel, described by Megatron-LM's own argument names
// (megatron/training/arguments.py defaults: ffn 4h, learned absolute positions, LayerNorm, biases
// on every linear, dropout 0.1, tied embeddings unless untied).
void read_megatron_gpt(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.num_kv_heads = r.uint({"num_query_groups"}, a.num_heads);
  a.head_dim = r.uint({"kv_channels"}, 0);
  a.intermediate_size = r.uint({"ffn_hidden_size"}, checked_mul(4, a.hidden_size));
  const bool rope = r.string({"position_embedding_type"}, "learned_absolute") == "rope";
  a.max_positions = rope ? 0 : r.uint({"max_position_embeddings", "seq_length"}, 1024);
  a.rms_norm = r.string({"normalization"}, "LayerNorm") == "RMSNorm";
  a.norm_bias = !a.rms_norm;
  a.gated_mlp = r.boolean({"swiglu"}, false);
  a.activation = a.gated_mlp ? "silu" : "gelu";
  a.fused_qkv = true;  // linear_qkv
  a.attn_out_bias = a.mlp_bias = r.boolean({"add_bias_linear"}, true);
  a.qkv_bias = r.boolean({"add_qkv_bias"}, a.attn_out_bias);
  a.attn_dropout = r.probability({"attention_dropout"}, 0.1);
  a.resid_dropout = r.probability({"hidden_dropout"}, 0.1);
  a.embd_dropout = a.resid_dropout;
  a.tied_embeddings = !r.boolean({"untie_embeddings_and_output_weights"}, false);
}

void read_gpt2(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"n_embd", "hidden_size"});
  a.num_layers = r.required({"n_layer", "num_hidden_layers"});
  a.num_heads = r.required({"n_head", "num_attention_heads"});
  a.intermediate_size = r.uint({"n_inner"}, checked_mul(4, a.hidden_size));
  a.max_positions = r.uint({"n_positions", "max_position_embeddings"}, 1024);
  a.max_seq_len = a.max_positions;
  a.fused_qkv = true;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = true;
  a.activation = r.string({"activation_function"}, "gelu_new");
  a.attn_dropout = r.probability({"attn_pdrop"}, 0.1);
  a.resid_dropout = r.probability({"resid_pdrop"}, 0.1);
  a.embd_dropout = r.probability({"embd_pdrop"}, 0.1);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

void read_gptj(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"n_embd", "hidden_size"});
  a.num_layers = r.required({"n_layer", "num_hidden_layers"});
  a.num_heads = r.required({"n_head", "num_attention_heads"});
  a.intermediate_size = r.uint({"n_inner"}, checked_mul(4, a.hidden_size));
  a.parallel_block = true;
  a.norms_per_layer = 1;
  a.mlp_bias = true;  // attention has no biases; fc_in, fc_out and lm_head do
  a.lm_head_bias = true;
  a.activation = r.string({"activation_function"}, "gelu_new");
  a.attn_dropout = r.probability({"attn_pdrop"}, 0.0);
  a.resid_dropout = r.probability({"resid_pdrop"}, 0.0);
  a.embd_dropout = r.probability({"embd_pdrop"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, false);
}

void read_gpt_neox(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_hidden_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.intermediate_size = r.required({"intermediate_size"});
  a.fused_qkv = true;
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, true);
  a.mlp_bias = true;
  a.parallel_block = r.boolean({"use_parallel_residual"}, true);  // still two norms per layer
  a.activation = r.string({"hidden_act"}, "gelu");
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.resid_dropout = a.embd_dropout = r.probability({"hidden_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, false);
}

// FalconConfig, and the RefinedWeb remote-code configs it replaced (n_head, n_layer, n_head_kv).
// "RefinedWeb" was the 40B layout, i.e. new_decoder_architecture.
void read_falcon(const JsonObject& r, Architecture& a, bool refined_web_40b) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size", "n_embed"});
  a.num_layers = r.required({"num_hidden_layers", "n_layer"});
  a.num_heads = r.required({"num_attention_heads", "n_head"});
  const bool new_arch = r.boolean({"new_decoder_architecture"}, refined_web_40b);
  const bool multi_query = r.boolean({"multi_query"}, true);
  // qkv width: new architecture (heads + 2 kv_heads) * head_dim; else multi_query means ONE
  // key/value head whatever num_kv_heads says; else full multi-head.
  if (new_arch) {
    a.num_kv_heads = r.uint({"num_kv_heads", "n_head_kv"}, a.num_heads);
  } else {
    a.num_kv_heads = multi_query ? 1 : a.num_heads;
  }
  a.intermediate_size = r.uint({"ffn_hidden_size"}, checked_mul(4, a.hidden_size));
  a.fused_qkv = true;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = r.boolean({"bias"}, false);
  a.parallel_block = r.boolean({"parallel_attn"}, true);
  std::uint64_t ln_parallel = r.uint({"num_ln_in_parallel_attn"}, new_arch ? 2 : 0, true);
  a.norms_per_layer = !a.parallel_block ? 2 : (ln_parallel == 2 ? 2 : 1);
  a.activation = r.string({"activation"}, "gelu");
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.resid_dropout = r.probability({"hidden_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

void read_phi(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.head_dim = 0;  // PhiAttention uses hidden_size / heads
  a.gated_mlp = false;
  a.rms_norm = false;
  a.parallel_block = true;
  a.norms_per_layer = 1;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = a.lm_head_bias = true;
  a.qk_norm = r.boolean({"qk_layernorm"}, false);
  a.activation = r.string({"hidden_act"}, "gelu_new");
  a.resid_dropout = r.probability({"resid_pdrop"}, 0.0);
  a.embd_dropout = r.probability({"embd_pdrop"}, 0.0);
}

void read_opt(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_hidden_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.intermediate_size = r.required({"ffn_dim"});
  // OPTLearnedPositionalEmbedding keeps 2 extra rows (fairseq's padding offset).
  a.max_seq_len = r.uint({"max_position_embeddings"}, 2048);
  a.max_positions = checked_add(a.max_seq_len, 2);
  a.embedding_dim = r.uint({"word_embed_proj_dim"}, a.hidden_size);
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = r.boolean({"enable_bias"}, true);
  a.norm_affine = r.boolean({"layer_norm_elementwise_affine"}, true);
  a.final_norm =
      r.boolean({"do_layer_norm_before"}, true) && !r.boolean({"_remove_final_layer_norm"}, false);
  a.activation = r.string({"activation_function"}, "relu");
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.resid_dropout = r.probability({"dropout"}, 0.1);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

void read_bert(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_hidden_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.intermediate_size = r.required({"intermediate_size"});
  a.max_positions = r.uint({"max_position_embeddings"}, 512);
  a.max_seq_len = a.max_positions;
  // RobertaEmbeddings numbers positions from padding_idx + 1 (= 2): two rows are never used.
  if (a.model_type == "roberta" && a.max_seq_len > 2) a.max_seq_len -= 2;
  a.type_vocab_size = r.uint({"type_vocab_size"}, 2, true);
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = true;
  a.embedding_norm = true;
  a.final_norm = false;
  a.pooler = true;
  a.lm_head = false;  // BertModel / RobertaModel: the task head is the user's choice
  a.activation = r.string({"hidden_act"}, "gelu");
  a.attn_dropout = r.probability({"attention_probs_dropout_prob"}, 0.1);
  a.resid_dropout = a.embd_dropout = r.probability({"hidden_dropout_prob"}, 0.1);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

void read_t5(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"d_model", "hidden_size"});
  a.num_layers = r.required({"num_layers", "num_hidden_layers"});
  a.num_heads = r.required({"num_heads", "num_attention_heads"});
  a.intermediate_size = r.required({"d_ff"});
  a.head_dim = r.uint({"d_kv"}, 64);
  a.num_decoder_layers = r.uint({"num_decoder_layers"}, a.num_layers);
  a.relative_attention_buckets = r.uint({"relative_attention_num_buckets"}, 32);
  a.rms_norm = true;
  const std::string ff = r.string({"feed_forward_proj"}, "relu");
  a.gated_mlp = ff.starts_with("gated-");
  a.activation = a.gated_mlp ? ff.substr(6) : ff;
  if (a.activation == "gelu" && a.gated_mlp) a.activation = "gelu_new";  // as T5Config maps it
  a.attn_dropout = a.resid_dropout = a.embd_dropout = r.probability({"dropout_rate"}, 0.1);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

// The sum of config values `values` (read from `keys`); a sum past 2^64 names the keys.
std::uint64_t sum_of(const JsonObject& r, std::initializer_list<std::string_view> keys,
                     std::initializer_list<std::uint64_t> values) {
  std::uint64_t total = 0;
  for (const std::uint64_t v : values) {
    if (__builtin_add_overflow(total, v, &total)) {
      r.fail(*(keys.end() - 1), fmt::format("{} exceeds 2^64 (expected sizes a model can have)",
                                            fmt::join(keys, " + ")));
    }
  }
  return total;
}

// Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: layer i is sparse when there are experts,
// (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers. Counted without a loop
// over the layers (the count may be huge).
std::uint64_t sparse_layers(const JsonObject& r, const Architecture& a) {
  const std::uint64_t step = r.uint({"decoder_sparse_step"}, 1);
  std::vector<std::uint64_t> dense_only = r.uint_list("mlp_only_layers");
  if (a.num_experts == 0) return 0;
  std::uint64_t sparse = a.num_layers / step;
  std::sort(dense_only.begin(), dense_only.end());
  dense_only.erase(std::unique(dense_only.begin(), dense_only.end()), dense_only.end());
  for (const std::uint64_t i : dense_only) {
    if (i < a.num_layers && (i + 1) % step == 0) --sparse;
  }
  return sparse;
}

// DeepSeek-V2 and V3 (transformers models/deepseek_v2 and models/deepseek_v3): MLA and MoE with
// shared experts. V3's router keeps its e_score_correction_bias as a buffer, not a parameter,
// and its multi-token-prediction layer (num_nextn_predict_layers) is not instantiated.
void read_deepseek(const JsonObject& r, Architecture& a) {
  const bool v3 = a.model_type == "deepseek_v3";
  read_decoder(r, a);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  // q_lora_rank: null in the file means a plain q_proj; absent means the class default 1536.
  a.q_lora_rank = r.is_null("q_lora_rank") ? 0 : r.uint({"q_lora_rank"}, 1536);
  a.kv_lora_rank = r.uint({"kv_lora_rank"}, 512);
  a.qk_nope_head_dim = r.uint({"qk_nope_head_dim"}, 128);
  a.qk_rope_head_dim = r.uint({"qk_rope_head_dim"}, 64);
  a.v_head_dim = r.uint({"v_head_dim"}, 128);
  a.head_dim =
      sum_of(r, {"qk_nope_head_dim", "qk_rope_head_dim"}, {a.qk_nope_head_dim, a.qk_rope_head_dim});
  sum_of(r, {"kv_lora_rank", "qk_rope_head_dim"}, {a.kv_lora_rank, a.qk_rope_head_dim});
  sum_of(r, {"qk_nope_head_dim", "v_head_dim"}, {a.qk_nope_head_dim, a.v_head_dim});
  a.num_kv_heads = a.num_heads;  // MLA: num_key_value_heads plays no part
  a.num_experts = r.uint({"n_routed_experts"}, v3 ? 256 : 0, true);
  if (a.num_experts > 0) {
    a.experts_per_token =
        v3 ? r.uint({"num_experts_per_tok"}, 8) : r.required({"num_experts_per_tok"});
    a.moe_intermediate_size = r.uint({"moe_intermediate_size"}, v3 ? 2048 : 1407);
    a.num_shared_experts = r.uint({"n_shared_experts"}, v3 ? 1 : 0, true);
    a.shared_expert_size = checked_mul(a.num_shared_experts, a.moe_intermediate_size);
    const std::uint64_t first_dense = r.uint({"first_k_dense_replace"}, v3 ? 3 : 0, true);
    // DeepseekV3DecoderLayer makes every layer from first_k_dense_replace on a MoE layer.
    const std::uint64_t freq = v3 ? 1 : r.uint({"moe_layer_freq"}, 1);
    // Layers i >= first_dense with i % freq == 0, counted without a loop over the layers (the
    // count may be huge). multiples(x): the multiples of freq in [0, x).
    const auto multiples = [&](std::uint64_t x) { return ceil_div(x, freq); };
    a.moe_layers = multiples(a.num_layers) - multiples(std::min(first_dense, a.num_layers));
  }
}

void read_qwen2_moe(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.qkv_bias = r.boolean({"qkv_bias"}, true);
  a.num_experts = r.uint({"num_experts"}, 60, true);
  a.experts_per_token = r.uint({"num_experts_per_tok"}, 4);
  a.moe_intermediate_size = r.uint({"moe_intermediate_size"}, 1408);
  a.shared_expert_size = r.uint({"shared_expert_intermediate_size"}, 5632, true);
  a.num_shared_experts = a.shared_expert_size > 0 ? 1 : 0;
  a.shared_expert_gate = a.shared_expert_size > 0;
  a.moe_layers = sparse_layers(r, a);
}

// Llama, Mistral, OLMo, Gemma 1/2, Qwen2, Phi-3 and Mixtral: the Llama layout with switches.
void read_llama_like(const JsonObject& r, Architecture& a) {
  const std::string& t = a.model_type;
  read_decoder(r, a);
  if (t == "llama" || t == "olmo" || t == "gemma" || t == "gemma2") {
    a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  }
  if (t == "llama") a.mlp_bias = r.boolean({"mlp_bias"}, false);
  if (t == "qwen2") a.qkv_bias = true;     // Qwen2Attention hard-codes q/k/v biases, none on o_proj
  if (t == "olmo") a.norm_affine = false;  // OlmoLayerNorm has no parameters
  if (t == "gemma" || t == "gemma2") {
    a.head_dim = r.uint({"head_dim"}, 256);
    a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
    // The MLP uses hidden_activation; transformers ignores hidden_act here since the fix
    // that made gelu_pytorch_tanh the default.
    a.activation = r.string({"hidden_activation"}, "gelu_pytorch_tanh");
  }
  if (t == "gemma2") a.norms_per_layer = 4;
  if (t == "phi3") {
    a.fused_qkv = a.fused_gate_up = true;
    a.resid_dropout = r.probability({"resid_pdrop"}, 0.0);
    a.embd_dropout = r.probability({"embd_pdrop"}, 0.0);
  }
  if (t == "mixtral") {
    a.num_experts = r.uint({"num_local_experts"}, 8);
    a.experts_per_token = r.uint({"num_experts_per_tok"}, 2);
    a.moe_intermediate_size = a.intermediate_size;
    a.moe_layers = a.num_layers;
  }
}

// Qwen3 and Qwen3-MoE (models/qwen3, models/qwen3_moe): Qwen2 without the q/k/v biases
// (attention_bias), an RMSNorm of head_dim on each head's query and key, and head_dim 128 by
// default (Qwen3Config), not hidden / heads. Qwen3-MoE has no shared expert and leaves
// intermediate_size unused when every layer is sparse.
void read_qwen3(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  if (a.model_type == "qwen3") a.head_dim = r.uint({"head_dim"}, 128);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  a.qk_norm = true;
  if (a.model_type != "qwen3_moe") return;
  a.num_experts = r.uint({"num_experts"}, 128, true);
  a.experts_per_token = r.uint({"num_experts_per_tok"}, 8);
  a.moe_intermediate_size = r.uint({"moe_intermediate_size"}, 768);
  a.moe_layers = sparse_layers(r, a);
}

// Gemma 3 text (models/gemma3, Gemma3ForCausalLM): Gemma 2's four norms per layer plus per-head
// q/k RMSNorms; sliding windows and query_pre_attn_scalar size nothing.
void read_gemma3(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  a.head_dim = r.uint({"head_dim"}, 256);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
  a.activation = r.string({"hidden_activation"}, "gelu_pytorch_tanh");
  a.norms_per_layer = 4;
  a.qk_norm = true;
}

// Gemma 3's multimodal checkpoints (model_type gemma3: Gemma3Config for
// Gemma3ForConditionalGeneration, models/gemma3/configuration_gemma3.py read at 008f5c8c29be):
// the language model is text_config, whose absent keys take Gemma3TextConfig's defaults
// (google/gemma-3-4b-it's config.json names only four of them), and a SigLIP tower is
// vision_config, absent keys at SiglipVisionConfig's defaults (models/siglip; the attention-
// pooling head unless vision_use_head is false). The text layers are Gemma 3 text's.
Json sub_config(const JsonObject& r, std::string_view key) {
  const auto v = r.find({key});
  return v ? JsonObject(*v).json() : Json::object();
}

void read_gemma3_multimodal(const JsonObject& r, Architecture& a) {
  constexpr std::array<std::pair<std::string_view, std::uint64_t>, 7> kTextDefaults = {{
      {"vocab_size", 262208},
      {"hidden_size", 2304},
      {"intermediate_size", 9216},
      {"num_hidden_layers", 26},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 4},
      {"head_dim", 256},
  }};
  Json text = sub_config(r, "text_config");
  for (const auto& [key, value] : kTextDefaults) {
    if (!text.contains(key) || text.at(key).is_null()) text[std::string(key)] = value;
  }
  read_gemma3(JsonObject(JsonValue(text, r.source(), "/text_config")), a);
  a.model_type = "gemma3_text";
  const Json vision = sub_config(r, "vision_config");
  const JsonObject v(JsonValue(vision, r.source(), "/vision_config"));
  VisionTower& t = a.vision;
  t.hidden = v.uint({"hidden_size"}, 768);
  t.intermediate = v.uint({"intermediate_size"}, 3072);
  t.layers = v.uint({"num_hidden_layers"}, 12);
  t.channels = v.uint({"num_channels"}, 3);
  t.image = v.uint({"image_size"}, 224);
  t.patch = v.uint({"patch_size"}, 16);
  if (t.patch > t.image) v.fail("patch_size", "is larger than image_size");
  t.pooling_head = v.boolean({"vision_use_head"}, true);
  t.projector_out = a.hidden_size;
  t.tokens_per_image = r.uint({"mm_tokens_per_image"}, 256);  // Gemma3Config's default
}

// OLMo-2 (models/olmo2): RMSNorms after attention and after the MLP (post_attention_layernorm,
// post_feedforward_layernorm) and q/k RMSNorms over all heads. OLMoE (models/olmoe): pre-norm,
// the same full-width q/k norms, every layer a MoE of intermediate_size experts, no shared one.
void read_olmo2(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  a.qk_norm = a.qk_norm_full_width = true;
  if (a.model_type != "olmoe") return;
  a.num_experts = r.uint({"num_experts"}, 64);
  a.experts_per_token = r.uint({"num_experts_per_tok"}, 8);
  a.moe_intermediate_size = a.intermediate_size;
  a.moe_layers = a.num_layers;
}

// Cohere / Command-R / Aya (models/cohere): attention and MLP in parallel after ONE LayerNorm
// without bias; tied by default; use_qk_norm adds LayerNorms of (heads, head_dim).
void read_cohere(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  a.rms_norm = false;
  a.norm_bias = false;
  a.parallel_block = true;
  a.norms_per_layer = 1;
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
  a.qk_norm = a.qk_norm_full_width = r.boolean({"use_qk_norm"}, false);
}

// StableLM (models/stablelm): nn.LayerNorm with bias, q/k/v biases when use_qkv_bias, a gated
// MLP; use_parallel_residual drops post_attention_layernorm; qk_layernorm adds per-head
// LayerNorms without bias.
void read_stablelm(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.rms_norm = false;
  a.qkv_bias = r.boolean({"use_qkv_bias"}, false);
  a.parallel_block = r.boolean({"use_parallel_residual"}, false);
  a.norms_per_layer = a.parallel_block ? 1 : 2;
  a.qk_norm = a.qk_norm_full_width = r.boolean({"qk_layernorm"}, false);
  a.resid_dropout = r.probability({"hidden_dropout"}, 0.0);
}

// StarCoder2 (models/starcoder2): biases on every projection (use_bias), LayerNorms with bias,
// a two-matrix MLP (c_fc, c_proj), tied by default.
void read_starcoder2(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.gated_mlp = false;
  a.rms_norm = false;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = r.boolean({"use_bias"}, true);
  a.activation = r.string({"hidden_act"}, "gelu_pytorch_tanh");
  a.resid_dropout = r.probability({"residual_dropout"}, 0.0);
  a.embd_dropout = r.probability({"embedding_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

// InternLM2 (remote code modeling_internlm2.py): fused wqkv of (heads + 2 kv heads) x head_dim,
// wqkv and wo biased when `bias` (InternLM2Config default true), an unbiased gated MLP.
void read_internlm2(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.fused_qkv = true;
  a.qkv_bias = a.attn_out_bias = r.boolean({"bias"}, true);
}

// ChatGLM2/3 and GLM-4 (remote code modeling_chatglm.py): its own key names, fused
// query_key_value with multi-query groups, a fused gated dense_h_to_4h, an untied output_layer.
void read_chatglm(const JsonObject& r, Architecture& a) {
  if (r.has("inner_hidden_size") && !r.has("ffn_hidden_size")) {
    r.fail("inner_hidden_size",
           "the first ChatGLM-6B layout is not supported (expected a ChatGLM2/3 or GLM-4 config "
           "with ffn_hidden_size)");
  }
  a.vocab_size = r.required({"padded_vocab_size", "vocab_size"});
  a.hidden_size = r.required({"hidden_size"});
  a.num_layers = r.required({"num_layers", "num_hidden_layers"});
  a.num_heads = r.required({"num_attention_heads"});
  a.head_dim = r.uint({"kv_channels"}, 0);
  a.num_kv_heads = r.boolean({"multi_query_attention"}, false)
                       ? r.uint({"multi_query_group_num"}, 1)
                       : a.num_heads;
  a.intermediate_size = r.required({"ffn_hidden_size"});
  a.gated_mlp = a.fused_gate_up = a.fused_qkv = true;
  a.rms_norm = r.boolean({"rmsnorm"}, true);
  a.attn_out_bias = a.mlp_bias = r.boolean({"add_bias_linear"}, false);
  a.qkv_bias = a.attn_out_bias || r.boolean({"add_qkv_bias"}, false);
  a.final_norm = r.boolean({"post_layer_norm"}, true);
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.resid_dropout = r.probability({"hidden_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, false);
}

// GLM and GLM-4-0414 in transformers (models/glm, models/glm4): q/k/v biased by default
// (attention_bias), a fused gate_up_proj, head_dim 128; glm4 adds post-attention and post-MLP
// RMSNorms (four per layer).
void read_glm(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.head_dim = r.uint({"head_dim"}, 128);
  a.qkv_bias = r.boolean({"attention_bias"}, true);
  a.fused_gate_up = true;
  if (a.model_type == "glm4") a.norms_per_layer = 4;
}

// BLOOM (models/bloom): LayerNorm on the embeddings, fused query_key_value, biases everywhere,
// ALiBi (no position table), tied.
void read_bloom(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size", "n_embed"});
  a.num_layers = r.required({"n_layer", "num_hidden_layers"});
  a.num_heads = r.required({"n_head", "num_attention_heads"});
  a.intermediate_size = checked_mul(4, a.hidden_size);
  a.fused_qkv = a.embedding_norm = true;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = true;
  a.activation = "gelu_pytorch_tanh";  // BloomGelu: the tanh approximation
  a.attn_dropout = r.probability({"attention_dropout"}, 0.0);
  a.resid_dropout = r.probability({"hidden_dropout"}, 0.0);
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

// MPT (models/mpt): d_model / n_heads / n_layers / expansion_ratio, a nested attn_config, fused
// Wqkv, ALiBi only (transformers' MptModel has no position table), no_bias removing the
// Linear and the LayerNorm biases, tied.
void read_mpt(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"d_model"});
  a.num_layers = r.required({"n_layers"});
  a.num_heads = r.required({"n_heads"});
  a.intermediate_size = checked_mul(r.uint({"expansion_ratio"}, 4), a.hidden_size);
  if (r.has("attn_config") && !r.is_null("attn_config")) {
    const JsonObject attn(r.at("attn_config"));
    if (!attn.boolean({"alibi"}, true)) {
      attn.fail("alibi", "expected true: transformers' MPT attends with ALiBi only, got false");
    }
    if (attn.boolean({"qk_ln"}, false)) {
      attn.fail("qk_ln", "expected false: transformers' MPT has no q/k LayerNorm, got true");
    }
    a.attn_dropout = attn.probability({"attn_pdrop"}, 0.0);
  }
  const bool bias = !r.boolean({"no_bias"}, true);
  a.fused_qkv = true;
  a.qkv_bias = a.attn_out_bias = a.mlp_bias = a.norm_bias = bias;
  a.activation = "gelu";
  a.resid_dropout = r.probability({"resid_pdrop"}, 0.0);
  a.embd_dropout = r.probability({"emb_pdrop"}, 0.0);
  a.tied_embeddings = true;  // MptForCausalLM's lm_head is tied to wte
}

// gpt-oss (models/gpt_oss): biased q/k/v/o, a sink logit per head, a biased router, experts as
// 3-D parameters with biases (GptOssExperts), head_dim 64, untied.
void read_gpt_oss(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.head_dim = r.uint({"head_dim"}, 64);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, true);
  a.attention_sinks = true;
  a.num_experts = r.uint({"num_local_experts"}, 128);
  a.experts_per_token = r.uint({"num_experts_per_tok", "experts_per_token"}, 4);
  a.moe_intermediate_size = a.intermediate_size;
  a.moe_layers = a.num_layers;
  a.router_bias = a.fused_experts = a.mlp_bias = true;
}

// Granite and Granite-MoE (models/granite, models/granitemoe): Llama's layout (the multipliers
// size nothing); Granite-MoE's experts are 3-D parameters without bias (input_linear,
// output_linear) behind an unbiased router.
void read_granite(const JsonObject& r, Architecture& a) {
  read_decoder(r, a);
  a.qkv_bias = a.attn_out_bias = r.boolean({"attention_bias"}, false);
  a.mlp_bias = r.boolean({"mlp_bias"}, false);
  if (a.model_type != "granitemoe") return;
  a.num_experts = r.uint({"num_local_experts"}, 8);
  a.experts_per_token = r.uint({"num_experts_per_tok"}, 2);
  a.moe_intermediate_size = a.intermediate_size;
  a.moe_layers = a.num_layers;
  a.fused_experts = true;
  a.mlp_bias = false;
}

// Mamba (models/mamba): no attention; each layer an RMSNorm and a selective-scan mixer.
// intermediate_size is expand x hidden when absent, time_step_rank "auto" is ceil(hidden / 16).
void read_mamba(const JsonObject& r, Architecture& a) {
  a.vocab_size = r.required({"vocab_size"});
  a.hidden_size = r.required({"hidden_size", "d_model"});
  a.num_layers = r.required({"num_hidden_layers", "n_layer"});
  a.num_heads = 0;
  a.intermediate_size =
      r.uint({"intermediate_size"}, checked_mul(r.uint({"expand"}, 2), a.hidden_size));
  a.ssm_state_size = r.uint({"state_size"}, 16);
  a.ssm_conv_kernel = r.uint({"conv_kernel"}, 4);
  const auto rank = r.find({"time_step_rank"});
  a.ssm_dt_rank = rank && rank->json().is_string() && rank->as_string() == "auto"
                      ? ceil_div(a.hidden_size, 16)
                      : r.uint({"time_step_rank"}, ceil_div(a.hidden_size, 16));
  a.mlp_bias = r.boolean({"use_bias"}, false);
  a.ssm_conv_bias = r.boolean({"use_conv_bias"}, true);
  a.rms_norm = true;
  a.norms_per_layer = 1;
  a.activation = r.string({"hidden_act"}, "silu");
  a.tied_embeddings = r.boolean({"tie_word_embeddings"}, true);
}

using Reader = void (*)(const JsonObject&, Architecture&);
struct FamilyReader {
  std::string_view type;
  Reader read;
};

void read_falcon_rw(const JsonObject& r, Architecture& a) { read_falcon(r, a, false); }

// Every supported model_type and its reader, sorted by type: the same types as the model
// family rows of src/model/families.cpp (tests/hf_config_test.cpp checks it).
constexpr std::array<FamilyReader, 40> kReaders = {{
    {"bert", read_bert},
    {"bloom", read_bloom},
    {"chatglm", read_chatglm},
    {"cohere", read_cohere},
    {"deepseek_v2", read_deepseek},
    {"deepseek_v3", read_deepseek},
    {"falcon", read_falcon_rw},
    {"gemma", read_llama_like},
    {"gemma2", read_llama_like},
    {"gemma3", read_gemma3_multimodal},
    {"gemma3_text", read_gemma3},
    {"glm", read_glm},
    {"glm4", read_glm},
    {"gpt2", read_gpt2},
    {"gpt_neox", read_gpt_neox},
    {"gpt_oss", read_gpt_oss},
    {"gptj", read_gptj},
    {"granite", read_granite},
    {"granitemoe", read_granite},
    {"internlm2", read_internlm2},
    {"llama", read_llama_like},
    {"mamba", read_mamba},
    {"megatron_gpt", read_megatron_gpt},
    {"mistral", read_llama_like},
    {"mixtral", read_llama_like},
    {"mpt", read_mpt},
    {"olmo", read_llama_like},
    {"olmo2", read_olmo2},
    {"olmoe", read_olmo2},
    {"opt", read_opt},
    {"phi", read_phi},
    {"phi3", read_llama_like},
    {"qwen2", read_llama_like},
    {"qwen2_moe", read_qwen2_moe},
    {"qwen3", read_qwen3},
    {"qwen3_moe", read_qwen3},
    {"roberta", read_bert},
    {"stablelm", read_stablelm},
    {"starcoder2", read_starcoder2},
    {"t5", read_t5},
}};

constexpr std::array<std::string_view, kReaders.size()> type_names() {
  std::array<std::string_view, kReaders.size()> names{};
  for (std::size_t i = 0; i < kReaders.size(); ++i) names[i] = kReaders[i].type;
  return names;
}
constexpr std::array<std::string_view, kReaders.size()> kModelTypes = type_names();

}  // namespace

std::span<const std::string_view> falcon_legacy_types() {
  static constexpr std::array<std::string_view, 2> kLegacy = {"RefinedWebModel", "RefinedWeb"};
  return kLegacy;
}

bool read_family(const JsonObject& r, Architecture& a, const std::string& raw_type) {
  if (a.model_type == "falcon") {
    read_falcon(r, a, raw_type == "RefinedWeb");
    return true;
  }
  for (const FamilyReader& f : kReaders) {
    if (f.type == a.model_type) {
      f.read(r, a);
      return true;
    }
  }
  return false;
}

}  // namespace memest::detail

namespace memest {

std::span<const std::string_view> supported_model_types() { return detail::kModelTypes; }

}  // namespace memest
