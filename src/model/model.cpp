#include "base/names.hpp"

#include <memest/dtype.hpp>
#include <memest/error.hpp>
#include <memest/model.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <array>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest {
namespace {

constexpr std::array<std::string_view, 10> kRoleNames = {
    "embedding", "position", "attention", "mlp",     "norm",
    "head",      "router",   "expert",    "adapter", "other"};

template <typename Pred, typename Value>
std::uint64_t sum_groups(const Inventory& inv, Pred pred, Value value) {
  std::uint64_t total = 0;
  for (const auto& g : inv.groups) {
    if (pred(g)) total = checked_add(total, value(g));
  }
  return total;
}

}  // namespace

std::string_view role_name(Role role) { return kRoleNames[static_cast<std::size_t>(role)]; }

std::span<const std::string_view> role_names() { return kRoleNames; }

Role parse_role(std::string_view text) {
  return detail::parse_enum<Role>(kRoleNames, text, "role");
}

TensorGroup make_group(std::string name, Role role, std::uint64_t rows, std::uint64_t cols,
                       std::uint64_t count, bool matmul, bool trainable) {
  TensorGroup g;
  g.name = std::move(name);
  g.role = role;
  g.rows = rows;
  g.cols = cols;
  g.count = count;
  g.matmul = matmul;
  g.trainable = trainable;
  return g;
}

std::uint64_t TensorGroup::tensor_elements() const { return checked_mul(rows, cols); }

std::uint64_t TensorGroup::elements() const { return checked_mul(tensor_elements(), count); }

std::uint64_t parameter_count(const Inventory& inv) {
  return sum_groups(
      inv, [](const TensorGroup& g) { return !g.quant_state; },
      [](const TensorGroup& g) { return g.elements(); });
}

std::uint64_t trainable_count(const Inventory& inv) {
  return sum_groups(
      inv, [](const TensorGroup& g) { return g.trainable && !g.quant_state; },
      [](const TensorGroup& g) { return g.elements(); });
}

std::uint64_t tensor_count(const Inventory& inv) {
  return sum_groups(
      inv, [](const TensorGroup& g) { return !g.quant_state; },
      [](const TensorGroup& g) { return g.count; });
}

std::uint64_t trainable_tensor_count(const Inventory& inv) {
  return sum_groups(
      inv, [](const TensorGroup& g) { return g.trainable && !g.quant_state; },
      [](const TensorGroup& g) { return g.count; });
}

std::uint64_t matmul_weight_count(const Inventory& inv, bool trainable_only) {
  return sum_groups(
      inv,
      [&](const TensorGroup& g) {
        return g.matmul && !g.quant_state && (g.trainable || !trainable_only);
      },
      [](const TensorGroup& g) { return g.elements(); });
}

std::uint64_t parameter_bytes(const Inventory& inv, Dtype default_dtype) {
  // Per tensor, because a 4-bit tensor with an odd element count still takes a whole last byte.
  return sum_groups(
      inv, [](const TensorGroup&) { return true; },
      [&](const TensorGroup& g) {
        return checked_mul(bytes_for(g.storage.value_or(default_dtype), g.tensor_elements()),
                           g.count);
      });
}

ModelSpec model_from_count(std::uint64_t params) {
  ModelSpec m;
  m.name = format_count_short(params) + " parameters";
  TensorGroup all;
  all.name = "parameters";
  all.cols = params;
  all.matmul = true;
  m.inventory.groups.push_back(all);
  m.inventory.shapes_known = false;
  m.active_params = params;
  return m;
}

namespace {

// Module names of one MLP, relative to the layer.
struct MlpNames {
  std::string gate, up, down, gate_up;
};

// Hugging Face module names per family. Only names: every shape comes from Architecture
// fields, so a family missing here still gets the right counts under Llama-style names.
struct Names {
  std::string embed = "model.embed_tokens";
  std::string positions = "model.embed_positions";
  std::string token_types = "embeddings.token_type_embeddings";
  std::string embed_norm = "embeddings.LayerNorm";
  std::string project_in = "model.project_in";
  std::string project_out = "model.project_out";
  std::string layer = "model.layers.*.";
  std::string q = "self_attn.q_proj", k = "self_attn.k_proj", v = "self_attn.v_proj";
  std::string o = "self_attn.o_proj", qkv = "self_attn.qkv_proj";
  std::string q_norm = "self_attn.q_layernorm", k_norm = "self_attn.k_layernorm";
  std::vector<std::string> norms = {"input_layernorm", "post_attention_layernorm",
                                    "pre_feedforward_layernorm", "post_feedforward_layernorm"};
  MlpNames mlp = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_up_proj"};
  std::string router = "mlp.gate";
  std::string experts = "mlp.experts.*.";
  MlpNames expert = {"gate_proj", "up_proj", "down_proj", "gate_up_proj"};
  MlpNames shared = {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj",
                     "mlp.shared_experts.down_proj", "mlp.shared_experts.gate_up_proj"};
  std::string shared_gate = "mlp.shared_expert_gate";
  std::string final_norm = "model.norm";
  std::string lm_head = "lm_head";
  std::string pooler = "pooler.dense";
};

// The families of 2024-2025 (transformers models/<type>/modeling_<type>.py; internlm2 and
// chatglm from their Hub repositories' remote code).
void names_for_recent(const std::string& t, Names& n) {
  if (t == "olmo2") {
    n.norms = {"post_attention_layernorm", "post_feedforward_layernorm"};
  } else if (t == "cohere") {
    n.norms = {"input_layernorm"};
  } else if (t == "starcoder2") {
    n.mlp = {"mlp.c_gate", "mlp.c_fc", "mlp.c_proj", "mlp.c_fc"};
  } else if (t == "internlm2") {
    n.embed = "model.tok_embeddings";
    n.qkv = "attention.wqkv";
    n.o = "attention.wo";
    n.norms = {"attention_norm", "ffn_norm"};
    n.mlp = {"feed_forward.w1", "feed_forward.w3", "feed_forward.w2", "feed_forward.w13"};
    n.lm_head = "output";
  } else if (t == "chatglm") {
    n.embed = "transformer.embedding.word_embeddings";
    n.layer = "transformer.encoder.layers.*.";
    n.qkv = "self_attention.query_key_value";
    n.o = "self_attention.dense";
    n.mlp = {"mlp.gate", "mlp.up", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"};
    n.final_norm = "transformer.encoder.final_layernorm";
    n.lm_head = "transformer.output_layer";
  } else if (t == "glm4") {
    n.norms = {"input_layernorm", "post_attention_layernorm", "post_self_attn_layernorm",
               "post_mlp_layernorm"};
  } else if (t == "bloom") {
    n.embed = "transformer.word_embeddings";
    n.embed_norm = "transformer.word_embeddings_layernorm";
    n.layer = "transformer.h.*.";
    n.qkv = "self_attention.query_key_value";
    n.o = "self_attention.dense";
    n.mlp = {"mlp.dense_gate", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"};
    n.final_norm = "transformer.ln_f";
  } else if (t == "mpt") {
    n.embed = "transformer.wte";
    n.layer = "transformer.blocks.*.";
    n.qkv = "attn.Wqkv";
    n.o = "attn.out_proj";
    n.norms = {"norm_1", "norm_2"};
    n.mlp = {"ffn.gate_proj", "ffn.up_proj", "ffn.down_proj", "ffn.up_proj"};
    n.final_norm = "transformer.norm_f";
  } else if (t == "gpt_oss") {
    n.router = "mlp.router";
    n.experts = "mlp.experts.";
  } else if (t == "granitemoe") {
    n.router = "block_sparse_moe.router.layer";
    n.experts = "block_sparse_moe.";
  }
}

Names names_for(const Architecture& a) {
  Names n;
  const std::string& t = a.model_type;
  if (t == "gpt2") {
    n.embed = "transformer.wte";
    n.positions = "transformer.wpe";
    n.layer = "transformer.h.*.";
    n.qkv = "attn.c_attn";
    n.o = "attn.c_proj";
    n.norms = {"ln_1", "ln_2"};
    n.mlp = {"mlp.c_gate", "mlp.c_fc", "mlp.c_proj", "mlp.c_fc"};
    n.final_norm = "transformer.ln_f";
  } else if (t == "gptj") {
    n.embed = "transformer.wte";
    n.layer = "transformer.h.*.";
    n.q = "attn.q_proj", n.k = "attn.k_proj", n.v = "attn.v_proj", n.o = "attn.out_proj";
    n.norms = {"ln_1", "ln_2"};
    n.mlp = {"mlp.fc_gate", "mlp.fc_in", "mlp.fc_out", "mlp.fc_in"};
    n.final_norm = "transformer.ln_f";
  } else if (t == "gpt_neox") {
    n.embed = "gpt_neox.embed_in";
    n.layer = "gpt_neox.layers.*.";
    n.qkv = "attention.query_key_value";
    n.o = "attention.dense";
    n.mlp = {"mlp.dense_gate", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"};
    n.final_norm = "gpt_neox.final_layer_norm";
    n.lm_head = "embed_out";
  } else if (t == "falcon") {
    n.embed = "transformer.word_embeddings";
    n.layer = "transformer.h.*.";
    n.qkv = "self_attention.query_key_value";
    n.o = "self_attention.dense";
    if (a.parallel_block && a.norms_per_layer == 2) n.norms = {"ln_attn", "ln_mlp"};
    n.mlp = {"mlp.dense_gate", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h", "mlp.dense_h_to_4h"};
    n.final_norm = "transformer.ln_f";
  } else if (t == "phi") {
    n.o = "self_attn.dense";
    n.mlp = {"mlp.fc_gate", "mlp.fc1", "mlp.fc2", "mlp.fc1"};
    n.final_norm = "model.final_layernorm";
  } else if (t == "opt") {
    n.embed = "model.decoder.embed_tokens";
    n.positions = "model.decoder.embed_positions";
    n.project_in = "model.decoder.project_in";
    n.project_out = "model.decoder.project_out";
    n.layer = "model.decoder.layers.*.";
    n.o = "self_attn.out_proj";
    n.norms = {"self_attn_layer_norm", "final_layer_norm"};
    n.mlp = {"fc_gate", "fc1", "fc2", "fc1"};
    n.final_norm = "model.decoder.final_layer_norm";
  } else if (t == "bert" || t == "roberta") {
    n.embed = "embeddings.word_embeddings";
    n.positions = "embeddings.position_embeddings";
    n.layer = "encoder.layer.*.";
    n.q = "attention.self.query", n.k = "attention.self.key", n.v = "attention.self.value";
    n.o = "attention.output.dense";
    n.norms = {"attention.output.LayerNorm", "output.LayerNorm"};
    n.mlp = {"intermediate.gate", "intermediate.dense", "output.dense", "intermediate.dense"};
    n.final_norm = "encoder.LayerNorm";
  } else if (t == "mixtral") {
    n.router = "block_sparse_moe.gate";
    n.experts = "block_sparse_moe.experts.*.";
    n.expert = {"w1", "w3", "w2", "w13"};
  } else if (t == "qwen2_moe") {
    n.shared = {"mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
                "mlp.shared_expert.down_proj", "mlp.shared_expert.gate_up_proj"};
  } else {
    names_for_recent(t, n);
  }
  if (a.qk_norm && t != "phi") n.q_norm = "self_attn.q_norm", n.k_norm = "self_attn.k_norm";
  return n;
}

class Builder {
 public:
  explicit Builder(const Architecture& a) : a_(a) {}

  void add(std::string name, Role role, std::uint64_t rows, std::uint64_t cols, std::uint64_t count,
           bool matmul) {
    if (count == 0 || rows == 0 || cols == 0) return;
    inv_.groups.push_back(make_group(std::move(name), role, rows, cols, count, matmul));
  }

  // A Linear layer: weight out x in, and a bias of out when it has one.
  void linear(const std::string& name, Role role, std::uint64_t out, std::uint64_t in,
              std::uint64_t count, bool bias, std::string_view kind) {
    add(name + ".weight", role, out, in, count, true);
    if (bias) add(name + ".bias", role, 1, out, count, false);
    // Both tensors of the module carry its kind, so LoRA and QLoRA can find the module.
    const std::size_t added = bias ? 2 : 1;
    if (count > 0 && out > 0 && in > 0) {
      for (std::size_t i = inv_.groups.size() - added; i < inv_.groups.size(); ++i) {
        inv_.groups[i].kind = std::string(kind);
      }
    }
  }

  void norm(const std::string& name, std::uint64_t dim, std::uint64_t count) {
    if (!a_.norm_affine) return;
    add(name + ".weight", Role::norm, 1, dim, count, false);
    if (!a_.rms_norm && a_.norm_bias) add(name + ".bias", Role::norm, 1, dim, count, false);
  }

  void mlp(const std::string& prefix, const MlpNames& n, std::uint64_t width, std::uint64_t count,
           Role role, bool bias) {
    const std::uint64_t h = a_.hidden_size;
    if (a_.gated_mlp && a_.fused_gate_up) {
      linear(prefix + n.gate_up, role, checked_mul(2, width), h, count, bias, "gate_up");
    } else if (a_.gated_mlp) {
      linear(prefix + n.gate, role, width, h, count, bias, "gate");
      linear(prefix + n.up, role, width, h, count, bias, "up");
    } else {
      linear(prefix + n.up, role, width, h, count, bias, "up");
    }
    linear(prefix + n.down, role, h, width, count, bias, "down");
  }

  // Experts as 3-D parameters, one per layer for all experts (gpt-oss GptOssExperts,
  // granitemoe GraniteMoeParallelExperts): [E, 2 I, h] up (gated) and [E, h, I] down, biases
  // [E, 2 I] and [E, h] when the MLP has them. Not Linears: LoRA and 4-bit loading skip them.
  void fused_experts(const std::string& prefix, std::uint64_t layers) {
    const std::uint64_t e = a_.num_experts, h = a_.hidden_size, w = a_.moe_intermediate_size;
    const std::uint64_t up = a_.gated_mlp ? checked_mul(2, w) : w;
    const bool gpt_oss = a_.model_type == "gpt_oss";
    const std::string up_name = prefix + (gpt_oss ? "gate_up_proj" : "input_linear.weight");
    const std::string down_name = prefix + (gpt_oss ? "down_proj" : "output_linear.weight");
    add(up_name, Role::expert, e, checked_mul(up, h), layers, true);
    inv_.groups.back().kind = "fused_experts";
    if (a_.mlp_bias) add(up_name + "_bias", Role::expert, e, up, layers, false);
    add(down_name, Role::expert, e, checked_mul(h, w), layers, true);
    inv_.groups.back().kind = "fused_experts";
    if (a_.mlp_bias) add(down_name + "_bias", Role::expert, e, h, layers, false);
  }

  Inventory take() { return std::move(inv_); }

 private:
  const Architecture& a_;
  Inventory inv_;
};

Architecture with_defaults(Architecture a) {
  const bool ssm = a.ssm_state_size > 0;  // a state-space model has no attention heads
  if (a.hidden_size == 0 || a.num_layers == 0 || (a.num_heads == 0 && !ssm) || a.vocab_size == 0) {
    throw Error(
        "architecture needs vocab_size, hidden_size, num_layers and num_heads (expected positive "
        "integers)");
  }
  if (a.head_dim == 0 && a.num_heads > 0) a.head_dim = a.hidden_size / a.num_heads;
  if (a.num_kv_heads == 0) a.num_kv_heads = a.num_heads;
  if (a.intermediate_size == 0) a.intermediate_size = checked_mul(4, a.hidden_size);
  if (a.moe_intermediate_size == 0) a.moe_intermediate_size = a.intermediate_size;
  if (a.num_experts == 0) a.moe_layers = 0;
  if (a.moe_layers > a.num_layers) a.moe_layers = a.num_layers;
  if (a.embedding_dim == 0) a.embedding_dim = a.hidden_size;
  return a;
}

// T5-style encoder-decoder: one shared embedding, an encoder stack of self-attention + MLP and a
// decoder stack that adds cross-attention, each stack with its own final norm.
void build_encoder_decoder(const Architecture& a, Builder& b) {
  const std::uint64_t h = a.hidden_size;
  const std::uint64_t inner = checked_mul(a.num_heads, a.head_dim);
  b.add("shared.weight", Role::embedding, a.vocab_size, h, 1, false);
  struct Stack {
    std::string prefix;
    std::uint64_t layers;
    bool cross;
  };
  for (const Stack& s :
       {Stack{"encoder.", a.num_layers, false}, Stack{"decoder.", a.num_decoder_layers, true}}) {
    if (s.layers == 0) continue;
    const std::string block = s.prefix + "block.*.";
    auto attention = [&](const std::string& m) {
      b.linear(block + m + ".q", Role::attention, inner, h, s.layers, a.qkv_bias, "q");
      b.linear(block + m + ".k", Role::attention, inner, h, s.layers, a.qkv_bias, "k");
      b.linear(block + m + ".v", Role::attention, inner, h, s.layers, a.qkv_bias, "v");
      b.linear(block + m + ".o", Role::attention, h, inner, s.layers, a.attn_out_bias, "o");
    };
    attention("layer.0.SelfAttention");
    b.add(s.prefix + "block.0.layer.0.SelfAttention.relative_attention_bias.weight", Role::position,
          a.relative_attention_buckets, a.num_heads, 1, false);
    b.norm(block + "layer.0.layer_norm", h, s.layers);
    std::size_t ff = 1;
    if (s.cross) {
      attention("layer.1.EncDecAttention");
      b.norm(block + "layer.1.layer_norm", h, s.layers);
      ff = 2;
    }
    const std::string ffp = block + fmt::format("layer.{}.DenseReluDense.", ff);
    b.mlp(ffp, {"wi_0", "wi_1", "wo", "wi"}, a.intermediate_size, s.layers, Role::mlp, a.mlp_bias);
    b.norm(block + fmt::format("layer.{}.layer_norm", ff), h, s.layers);
    if (a.final_norm) b.norm(s.prefix + "final_layer_norm", h, 1);
  }
}

void build_attention(const Architecture& a, const Names& n, Builder& b) {
  const std::uint64_t h = a.hidden_size, layers = a.num_layers;
  const std::string& p = n.layer;
  if (a.kv_lora_rank > 0) {
    // DeepSeek-V2 multi-head latent attention.
    const std::uint64_t q_head = checked_add(a.qk_nope_head_dim, a.qk_rope_head_dim);
    const std::uint64_t q_out = checked_mul(a.num_heads, q_head);
    if (a.q_lora_rank == 0) {
      b.linear(p + "self_attn.q_proj", Role::attention, q_out, h, layers, false, "q");
    } else {
      b.linear(p + "self_attn.q_a_proj", Role::attention, a.q_lora_rank, h, layers, a.qkv_bias,
               "q");
      b.norm(p + "self_attn.q_a_layernorm", a.q_lora_rank, layers);
      b.linear(p + "self_attn.q_b_proj", Role::attention, q_out, a.q_lora_rank, layers, false, "q");
    }
    b.linear(p + "self_attn.kv_a_proj_with_mqa", Role::attention,
             checked_add(a.kv_lora_rank, a.qk_rope_head_dim), h, layers, a.qkv_bias, "kv");
    b.norm(p + "self_attn.kv_a_layernorm", a.kv_lora_rank, layers);
    b.linear(p + "self_attn.kv_b_proj", Role::attention,
             checked_mul(a.num_heads, checked_add(a.qk_nope_head_dim, a.v_head_dim)),
             a.kv_lora_rank, layers, false, "kv");
    b.linear(p + "self_attn.o_proj", Role::attention, h, checked_mul(a.num_heads, a.v_head_dim),
             layers, a.attn_out_bias, "o");
    return;
  }
  const std::uint64_t q_out = checked_mul(a.num_heads, a.head_dim);
  const std::uint64_t kv_out = checked_mul(a.num_kv_heads, a.head_dim);
  if (a.fused_qkv) {
    b.linear(p + n.qkv, Role::attention, checked_add(q_out, checked_mul(2, kv_out)), h, layers,
             a.qkv_bias, "qkv");
  } else {
    b.linear(p + n.q, Role::attention, q_out, h, layers, a.qkv_bias, "q");
    b.linear(p + n.k, Role::attention, kv_out, h, layers, a.qkv_bias, "k");
    b.linear(p + n.v, Role::attention, kv_out, h, layers, a.qkv_bias, "v");
  }
  if (a.qk_norm && a.qk_norm_full_width) {
    // One weight per channel of all heads, no bias (Olmo2RMSNorm(heads * head_dim),
    // CohereLayerNorm((heads, head_dim)), StableLmLayerNormPerHead(bias=False)).
    b.add(p + n.q_norm + ".weight", Role::norm, 1, q_out, layers, false);
    b.add(p + n.k_norm + ".weight", Role::norm, 1, kv_out, layers, false);
  } else if (a.qk_norm) {
    b.norm(p + n.q_norm, a.head_dim, layers);
    b.norm(p + n.k_norm, a.head_dim, layers);
  }
  b.linear(p + n.o, Role::attention, h, q_out, layers, a.attn_out_bias, "o");
  // gpt-oss: a learned logit per head joins each softmax (GptOssAttention.sinks).
  if (a.attention_sinks)
    b.add(p + "self_attn.sinks", Role::attention, 1, a.num_heads, layers, false);
}

// Mamba's mixer (transformers models/mamba/modeling_mamba.py, MambaMixer): in_proj to x and the
// gate, a depthwise causal conv1d, x_proj to the time step and B, C, dt_proj, A_log, D, out_proj.
void build_mamba(const Architecture& a, Builder& b) {
  const std::uint64_t h = a.hidden_size, I = a.intermediate_size, N = a.ssm_state_size;
  const std::uint64_t layers = a.num_layers, R = a.ssm_dt_rank;
  const std::string p = "backbone.layers.*.";
  b.add("backbone.embeddings.weight", Role::embedding, a.vocab_size, h, 1, false);
  b.norm(p + "norm", h, layers);
  b.linear(p + "mixer.in_proj", Role::mlp, checked_mul(2, I), h, layers, a.mlp_bias, "in_proj");
  b.add(p + "mixer.conv1d.weight", Role::mlp, I, a.ssm_conv_kernel, layers, false);
  if (a.ssm_conv_bias) b.add(p + "mixer.conv1d.bias", Role::mlp, 1, I, layers, false);
  b.linear(p + "mixer.x_proj", Role::mlp, checked_add(R, checked_mul(2, N)), I, layers, false,
           "x_proj");
  b.linear(p + "mixer.dt_proj", Role::mlp, I, R, layers, true, "dt_proj");
  b.add(p + "mixer.A_log", Role::mlp, I, N, layers, false);
  b.add(p + "mixer.D", Role::mlp, 1, I, layers, false);
  b.linear(p + "mixer.out_proj", Role::mlp, h, I, layers, a.mlp_bias, "out_proj");
  if (a.final_norm) b.norm("backbone.norm_f", h, 1);
}

void build_decoder_only(const Architecture& a, Builder& b) {
  const Names n = names_for(a);
  const std::uint64_t h = a.hidden_size, layers = a.num_layers;
  b.add(n.embed + ".weight", Role::embedding, a.vocab_size, a.embedding_dim, 1, false);
  b.add(n.positions + ".weight", Role::position, a.max_positions, h, 1, false);
  b.add(n.token_types + ".weight", Role::embedding, a.type_vocab_size, h, 1, false);
  if (a.embedding_norm) b.norm(n.embed_norm, h, 1);
  if (a.embedding_dim != h) {
    b.linear(n.project_in, Role::embedding, h, a.embedding_dim, 1, false, "proj");
  }

  build_attention(a, n, b);

  const std::uint64_t dense_layers = layers - a.moe_layers;
  b.mlp(n.layer, n.mlp, a.intermediate_size, dense_layers, Role::mlp, a.mlp_bias);
  if (a.moe_layers > 0) {
    b.linear(n.layer + n.router, Role::router, a.num_experts, h, a.moe_layers, a.router_bias,
             "router");
    if (a.fused_experts) {
      b.fused_experts(n.layer + n.experts, a.moe_layers);
    } else {
      b.mlp(n.layer + n.experts, n.expert, a.moe_intermediate_size,
            checked_mul(a.moe_layers, a.num_experts), Role::expert, a.mlp_bias);
    }
    if (a.shared_expert_size > 0) {
      b.mlp(n.layer, n.shared, a.shared_expert_size, a.moe_layers, Role::mlp, a.mlp_bias);
      if (a.shared_expert_gate) {
        b.linear(n.layer + n.shared_gate, Role::router, 1, h, a.moe_layers, false, "router");
      }
    }
  }

  for (std::uint64_t i = 0; i < a.norms_per_layer; ++i) {
    const std::string name =
        i < n.norms.size() ? n.norms[static_cast<std::size_t>(i)] : fmt::format("norm_{}", i);
    b.norm(n.layer + name, h, layers);
  }
  if (a.final_norm) b.norm(n.final_norm, h, 1);
  if (a.embedding_dim != h) {
    b.linear(n.project_out, Role::head, a.embedding_dim, h, 1, false, "proj");
  }
  if (a.pooler) b.linear(n.pooler, Role::head, h, h, 1, true, "pooler");
}

}  // namespace

Inventory build_inventory(const Architecture& arch) {
  const Architecture a = with_defaults(arch);
  Builder b(a);
  if (a.ssm_state_size > 0) {
    build_mamba(a, b);
  } else if (a.num_decoder_layers > 0) {
    build_encoder_decoder(a, b);
  } else {
    build_decoder_only(a, b);
  }
  if (a.lm_head) {
    const std::string head = names_for(a).lm_head;
    if (!a.tied_embeddings) {
      b.linear(head, Role::head, a.vocab_size, a.embedding_dim, 1, a.lm_head_bias, "lm_head");
    } else if (a.lm_head_bias) {
      b.add(head + ".bias", Role::head, 1, a.vocab_size, 1, false);
    }
  }
  return b.take();
}

std::uint64_t active_parameter_count(const Architecture& arch, const Inventory& inv) {
  const std::uint64_t total = parameter_count(inv);
  if (arch.num_experts == 0 || arch.moe_layers == 0 || arch.experts_per_token >= arch.num_experts) {
    return total;
  }
  const std::uint64_t experts = sum_groups(
      inv, [](const TensorGroup& g) { return g.role == Role::expert && !g.quant_state; },
      [](const TensorGroup& g) { return g.elements(); });
  const std::uint64_t per_expert = experts / checked_mul(arch.moe_layers, arch.num_experts);
  const std::uint64_t skipped = checked_mul(checked_mul(per_expert, arch.moe_layers),
                                            arch.num_experts - arch.experts_per_token);
  return total - skipped;
}

}  // namespace memest
