#include "base/names.hpp"
#include "model/families.hpp"
#include "model/walked_layers.hpp"

#include <memest/dtype.hpp>
#include <memest/error.hpp>
#include <memest/model.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest {
namespace {

constexpr std::array<std::string_view, 11> kRoleNames = {
    "embedding", "position", "attention", "mlp",    "norm", "head",
    "router",    "expert",   "adapter",   "vision", "other"};

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
                       std::uint64_t count, GroupUse use) {
  TensorGroup g;
  g.name = std::move(name);
  g.role = role;
  g.rows = rows;
  g.cols = cols;
  g.count = count;
  g.matmul = use.matmul;
  g.trainable = use.trainable;
  return g;
}

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

Architecture canonical_architecture(std::uint64_t params) {
  struct Size {
    std::uint64_t below, hidden;
  };
  constexpr std::array<Size, 9> kSizes = {{{200'000'000, 768},
                                           {500'000'000, 1024},
                                           {1'200'000'000, 2048},
                                           {2'500'000'000, 2560},
                                           {5'000'000'000, 3072},
                                           {10'000'000'000, 4096},
                                           {20'000'000'000, 5120},
                                           {40'000'000'000, 6656},
                                           {100'000'000'000, 8192}}};
  Architecture a;
  a.model_type = "llama";
  a.hidden_size = 12288;
  for (const auto& sz : kSizes) {
    if (params < sz.below) {
      a.hidden_size = sz.hidden;
      break;
    }
  }
  const std::uint64_t h = a.hidden_size;
  a.vocab_size = 32000;
  a.head_dim = h >= 2048 ? 128 : 64;
  a.num_heads = h / a.head_dim;
  a.num_kv_heads = a.num_heads;
  a.intermediate_size = ceil_div(ceil_div(8 * h, 3), 256) * 256;
  const std::uint64_t embed = 2 * a.vocab_size * h;
  const double per_layer = 12.0 * static_cast<double>(h) * static_cast<double>(h);
  const double layers =
      params > embed ? std::round(static_cast<double>(params - embed) / per_layer) : 1.0;
  a.num_layers = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(layers));
  a.gated_mlp = true;
  a.rms_norm = true;
  a.norm_bias = false;
  return a;
}

void check_walked_layers(std::uint64_t layers, std::string_view what) {
  if (layers <= kMaxWalkedLayers) return;
  throw Error(
      fmt::format("{}: the model's {} layers are walked one at a time there; at most {} "
                  "are (the estimate without it takes any number)",
                  what, format_count(layers), format_count(kMaxWalkedLayers)));
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
  m.canonical_inventory = build_inventory(canonical_architecture(params));
  return m;
}

namespace {

using detail::MlpNames;
using detail::ModuleNames;

// "model.layers.*." + "self_attn.q_proj" + ".weight": a module or tensor name from its parts.
std::string cat(std::string_view a, std::string_view b, std::string_view c = {}) {
  std::string out;
  out.reserve(a.size() + b.size() + c.size());
  out.append(a).append(b).append(c);
  return out;
}

// Whether a Linear has a bias, named at the call.
enum class Bias : bool { no, yes };
constexpr Bias bias_if(bool has) { return has ? Bias::yes : Bias::no; }

class Builder {
 public:
  explicit Builder(const Architecture& a) : a_(a) {}

  void add(std::string name, Role role, std::uint64_t rows, std::uint64_t cols, std::uint64_t count,
           GroupUse use = {}) {
    if (count == 0 || rows == 0 || cols == 0) return;
    inv_.groups.push_back(make_group(std::move(name), role, rows, cols, count, use));
  }

  // A Linear layer: weight out x in, and a bias of out when it has one.
  void linear(std::string_view name, Role role, std::uint64_t out, std::uint64_t in,
              std::uint64_t count, Bias bias, std::string_view kind) {
    add(cat(name, ".weight"), role, out, in, count, {.matmul = true});
    if (bias == Bias::yes) add(cat(name, ".bias"), role, 1, out, count);
    // Both tensors of the module carry its kind, so LoRA and QLoRA can find the module.
    const std::size_t added = bias == Bias::yes ? 2 : 1;
    if (count > 0 && out > 0 && in > 0) {
      for (std::size_t i = inv_.groups.size() - added; i < inv_.groups.size(); ++i) {
        inv_.groups[i].kind = std::string(kind);
      }
    }
  }

  void norm(std::string_view name, std::uint64_t dim, std::uint64_t count) {
    if (!a_.norm_affine) return;
    add(cat(name, ".weight"), Role::norm, 1, dim, count);
    if (!a_.rms_norm && a_.norm_bias) add(cat(name, ".bias"), Role::norm, 1, dim, count);
  }

  void mlp(std::string_view prefix, const MlpNames& n, std::uint64_t width, std::uint64_t count,
           Role role, Bias bias) {
    const std::uint64_t h = a_.hidden_size;
    if (a_.gated_mlp && a_.fused_gate_up) {
      linear(cat(prefix, n.gate_up), role, checked_mul(2, width), h, count, bias, "gate_up");
    } else if (a_.gated_mlp) {
      linear(cat(prefix, n.gate), role, width, h, count, bias, "gate");
      linear(cat(prefix, n.up), role, width, h, count, bias, "up");
    } else {
      linear(cat(prefix, n.up), role, width, h, count, bias, "up");
    }
    linear(cat(prefix, n.down), role, h, width, count, bias, "down");
  }

  // Experts as 3-D parameters, one per layer for all experts (gpt-oss GptOssExperts,
  // granitemoe GraniteMoeParallelExperts): [E, 2 I, h] up (gated) and [E, h, I] down, biases
  // [E, 2 I] and [E, h] when the MLP has them. Not Linears: LoRA and 4-bit loading skip them.
  void fused_experts(const ModuleNames& n, std::uint64_t layers) {
    const std::uint64_t e = a_.num_experts, h = a_.hidden_size, w = a_.moe_intermediate_size;
    const std::uint64_t up = a_.gated_mlp ? checked_mul(2, w) : w;
    const std::string up_name = cat(n.layer, n.experts, n.fused_up);
    const std::string down_name = cat(n.layer, n.experts, n.fused_down);
    add(up_name, Role::expert, e, checked_mul(up, h), layers, {.matmul = true});
    inv_.groups.back().kind = "fused_experts";
    if (a_.mlp_bias) add(up_name + "_bias", Role::expert, e, up, layers);
    add(down_name, Role::expert, e, checked_mul(h, w), layers, {.matmul = true});
    inv_.groups.back().kind = "fused_experts";
    if (a_.mlp_bias) add(down_name + "_bias", Role::expert, e, h, layers);
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

// T5-style encoder-decoder: one shared embedding, an encoder of self-attention + MLP layers and a
// decoder whose layers add cross-attention, each with its own final norm.
void build_encoder_decoder(const Architecture& a, Builder& b) {
  const std::uint64_t h = a.hidden_size;
  const std::uint64_t inner = checked_mul(a.num_heads, a.head_dim);
  b.add("shared.weight", Role::embedding, a.vocab_size, h, 1);
  struct Half {  // the encoder or the decoder (transformers' T5Stack)
    std::string prefix;
    std::uint64_t layers;
    bool cross;
  };
  for (const Half& s :
       {Half{"encoder.", a.num_layers, false}, Half{"decoder.", a.num_decoder_layers, true}}) {
    if (s.layers == 0) continue;
    const std::string block = s.prefix + "block.*.";
    auto attention = [&](const std::string& m) {
      b.linear(block + m + ".q", Role::attention, inner, h, s.layers, bias_if(a.qkv_bias), "q");
      b.linear(block + m + ".k", Role::attention, inner, h, s.layers, bias_if(a.qkv_bias), "k");
      b.linear(block + m + ".v", Role::attention, inner, h, s.layers, bias_if(a.qkv_bias), "v");
      b.linear(block + m + ".o", Role::attention, h, inner, s.layers, bias_if(a.attn_out_bias),
               "o");
    };
    attention("layer.0.SelfAttention");
    b.add(s.prefix + "block.0.layer.0.SelfAttention.relative_attention_bias.weight", Role::position,
          a.relative_attention_buckets, a.num_heads, 1);
    b.norm(block + "layer.0.layer_norm", h, s.layers);
    std::size_t ff = 1;
    if (s.cross) {
      attention("layer.1.EncDecAttention");
      b.norm(block + "layer.1.layer_norm", h, s.layers);
      ff = 2;
    }
    const std::string ffp = block + fmt::format("layer.{}.DenseReluDense.", ff);
    b.mlp(ffp, {"wi_0", "wi_1", "wo", "wi"}, a.intermediate_size, s.layers, Role::mlp,
          bias_if(a.mlp_bias));
    b.norm(block + fmt::format("layer.{}.layer_norm", ff), h, s.layers);
    if (a.final_norm) b.norm(s.prefix + "final_layer_norm", h, 1);
  }
}

void build_attention(const Architecture& a, const ModuleNames& n, Builder& b) {
  const std::uint64_t h = a.hidden_size, layers = a.num_layers;
  const std::string p(n.layer);
  if (a.kv_lora_rank > 0) {
    // DeepSeek-V2 multi-head latent attention.
    const std::uint64_t q_head = checked_add(a.qk_nope_head_dim, a.qk_rope_head_dim);
    const std::uint64_t q_out = checked_mul(a.num_heads, q_head);
    if (a.q_lora_rank == 0) {
      b.linear(p + "self_attn.q_proj", Role::attention, q_out, h, layers, Bias::no, "q");
    } else {
      b.linear(p + "self_attn.q_a_proj", Role::attention, a.q_lora_rank, h, layers,
               bias_if(a.qkv_bias), "q");
      b.norm(p + "self_attn.q_a_layernorm", a.q_lora_rank, layers);
      b.linear(p + "self_attn.q_b_proj", Role::attention, q_out, a.q_lora_rank, layers, Bias::no,
               "q");
    }
    b.linear(p + "self_attn.kv_a_proj_with_mqa", Role::attention,
             checked_add(a.kv_lora_rank, a.qk_rope_head_dim), h, layers, bias_if(a.qkv_bias), "kv");
    b.norm(p + "self_attn.kv_a_layernorm", a.kv_lora_rank, layers);
    b.linear(p + "self_attn.kv_b_proj", Role::attention,
             checked_mul(a.num_heads, checked_add(a.qk_nope_head_dim, a.v_head_dim)),
             a.kv_lora_rank, layers, Bias::no, "kv");
    b.linear(p + "self_attn.o_proj", Role::attention, h, checked_mul(a.num_heads, a.v_head_dim),
             layers, bias_if(a.attn_out_bias), "o");
    return;
  }
  const std::uint64_t q_out = checked_mul(a.num_heads, a.head_dim);
  const std::uint64_t kv_out = checked_mul(a.num_kv_heads, a.head_dim);
  if (a.fused_qkv) {
    b.linear(cat(p, n.qkv), Role::attention, checked_add(q_out, checked_mul(2, kv_out)), h, layers,
             bias_if(a.qkv_bias), "qkv");
  } else {
    b.linear(cat(p, n.q), Role::attention, q_out, h, layers, bias_if(a.qkv_bias), "q");
    b.linear(cat(p, n.k), Role::attention, kv_out, h, layers, bias_if(a.qkv_bias), "k");
    b.linear(cat(p, n.v), Role::attention, kv_out, h, layers, bias_if(a.qkv_bias), "v");
  }
  if (a.qk_norm && a.qk_norm_full_width) {
    // One weight per channel of all heads, no bias (Olmo2RMSNorm(heads * head_dim),
    // CohereLayerNorm((heads, head_dim)), StableLmLayerNormPerHead(bias=False)).
    b.add(cat(p, n.q_norm, ".weight"), Role::norm, 1, q_out, layers);
    b.add(cat(p, n.k_norm, ".weight"), Role::norm, 1, kv_out, layers);
  } else if (a.qk_norm) {
    b.norm(cat(p, n.q_norm), a.head_dim, layers);
    b.norm(cat(p, n.k_norm), a.head_dim, layers);
  }
  b.linear(cat(p, n.o), Role::attention, h, q_out, layers, bias_if(a.attn_out_bias), "o");
  // gpt-oss: a learned logit per head joins each softmax (GptOssAttention.sinks).
  if (a.attention_sinks) b.add(p + "self_attn.sinks", Role::attention, 1, a.num_heads, layers);
}

// Mamba's mixer (transformers models/mamba/modeling_mamba.py, MambaMixer): in_proj to x and the
// gate, a depthwise causal conv1d, x_proj to the time step and B, C, dt_proj, A_log, D, out_proj.
void build_mamba(const Architecture& a, Builder& b) {
  const std::uint64_t h = a.hidden_size, I = a.intermediate_size, N = a.ssm_state_size;
  const std::uint64_t layers = a.num_layers, R = a.ssm_dt_rank;
  const std::string p = "backbone.layers.*.";
  b.add("backbone.embeddings.weight", Role::embedding, a.vocab_size, h, 1);
  b.norm(p + "norm", h, layers);
  b.linear(p + "mixer.in_proj", Role::mlp, checked_mul(2, I), h, layers, bias_if(a.mlp_bias),
           "in_proj");
  b.add(p + "mixer.conv1d.weight", Role::mlp, I, a.ssm_conv_kernel, layers);
  if (a.ssm_conv_bias) b.add(p + "mixer.conv1d.bias", Role::mlp, 1, I, layers);
  b.linear(p + "mixer.x_proj", Role::mlp, checked_add(R, checked_mul(2, N)), I, layers, Bias::no,
           "x_proj");
  b.linear(p + "mixer.dt_proj", Role::mlp, I, R, layers, Bias::yes, "dt_proj");
  b.add(p + "mixer.A_log", Role::mlp, I, N, layers);
  b.add(p + "mixer.D", Role::mlp, 1, I, layers);
  b.linear(p + "mixer.out_proj", Role::mlp, h, I, layers, bias_if(a.mlp_bias), "out_proj");
  if (a.final_norm) b.norm("backbone.norm_f", h, 1);
}

void build_decoder_only(const Architecture& a, Builder& b) {
  const ModuleNames& n = detail::family_of(a.model_type).names;
  const std::uint64_t h = a.hidden_size, layers = a.num_layers;
  b.add(cat(n.embed, ".weight"), Role::embedding, a.vocab_size, a.embedding_dim, 1);
  b.add(cat(n.positions, ".weight"), Role::position, a.max_positions, h, 1);
  b.add(cat(n.token_types, ".weight"), Role::embedding, a.type_vocab_size, h, 1);
  if (a.embedding_norm) b.norm(n.embed_norm, h, 1);
  if (a.embedding_dim != h) {
    b.linear(n.project_in, Role::embedding, h, a.embedding_dim, 1, Bias::no, "proj");
  }

  build_attention(a, n, b);

  const std::uint64_t dense_layers = layers - a.moe_layers;
  b.mlp(n.layer, n.mlp, a.intermediate_size, dense_layers, Role::mlp, bias_if(a.mlp_bias));
  if (a.moe_layers > 0) {
    b.linear(cat(n.layer, n.router), Role::router, a.num_experts, h, a.moe_layers,
             bias_if(a.router_bias), "router");
    if (a.fused_experts) {
      b.fused_experts(n, a.moe_layers);
    } else {
      b.mlp(cat(n.layer, n.experts), n.expert, a.moe_intermediate_size,
            checked_mul(a.moe_layers, a.num_experts), Role::expert, bias_if(a.mlp_bias));
    }
    if (a.shared_expert_size > 0) {
      b.mlp(n.layer, n.shared, a.shared_expert_size, a.moe_layers, Role::mlp, bias_if(a.mlp_bias));
      if (a.shared_expert_gate) {
        b.linear(cat(n.layer, n.shared_gate), Role::router, 1, h, a.moe_layers, Bias::no, "router");
      }
    }
  }

  // Falcon's new architecture names the two norms of its parallel block apart.
  const bool parallel_names =
      a.parallel_block && a.norms_per_layer == 2 && !n.parallel_norms[0].empty();
  const auto& norms = parallel_names ? n.parallel_norms : n.norms;
  for (std::uint64_t i = 0; i < a.norms_per_layer; ++i) {
    const bool named = i < norms.size() && !norms[static_cast<std::size_t>(i)].empty();
    const std::string name =
        named ? std::string(norms[static_cast<std::size_t>(i)]) : fmt::format("norm_{}", i);
    b.norm(cat(n.layer, name), h, layers);
  }
  if (a.final_norm) b.norm(n.final_norm, h, 1);
  if (a.embedding_dim != h) {
    b.linear(n.project_out, Role::head, a.embedding_dim, h, 1, Bias::no, "proj");
  }
  if (a.pooler) b.linear(n.pooler, Role::head, h, h, 1, Bias::yes, "pooler");
}

}  // namespace

namespace {

// A vision encoder held beside the language model: Gemma 3's SigLIP tower and its projector,
// as transformers builds them (models/siglip/modeling_siglip.py SiglipVisionTransformer,
// models/gemma3/modeling_gemma3.py Gemma3MultiModalProjector, read at 008f5c8c29be). A
// text-only step never calls the tower: no input reaches it, so autograd gives its parameters
// no gradient and the optimizer skips them (no state).

class TowerGroups {
 public:
  void add(std::string name, u64 rows, u64 cols, u64 count = 1) {
    out_.push_back(make_group(std::move(name), Role::vision, rows, cols, count,
                              {.matmul = false, .trainable = false}));
  }
  // nn.Linear(in, out) with its bias.
  void linear(const std::string& name, u64 out, u64 in, u64 count = 1) {
    add(name + ".weight", out, in, count);
    add(name + ".bias", 1, out, count);
  }
  // nn.LayerNorm(dim): weight and bias.
  void layer_norm(const std::string& name, u64 dim, u64 count = 1) {
    add(name + ".weight", 1, dim, count);
    add(name + ".bias", 1, dim, count);
  }
  std::vector<TensorGroup> take() { return std::move(out_); }

 private:
  std::vector<TensorGroup> out_;
};

// SiglipEncoderLayer, once per layer: attention (k, v, q, out with biases), two LayerNorms and
// the MLP (fc1, fc2 with biases). No '*' in the names: the tower is not one of the text layers.
void encoder_layers(const VisionTower& v, TowerGroups& t) {
  const std::string layer =
      "vision_tower.vision_model.encoder.layers.0.." + std::to_string(v.layers - 1) + ".";
  for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
    t.linear(layer + "self_attn." + proj, v.hidden, v.hidden, v.layers);
  }
  t.layer_norm(layer + "layer_norm1", v.hidden, v.layers);
  t.linear(layer + "mlp.fc1", v.intermediate, v.hidden, v.layers);
  t.linear(layer + "mlp.fc2", v.hidden, v.intermediate, v.layers);
  t.layer_norm(layer + "layer_norm2", v.hidden, v.layers);
}

// SiglipMultiheadAttentionPoolingHead (vision_use_head): a probe, nn.MultiheadAttention (its
// packed in_proj and out_proj), a LayerNorm and an MLP.
void pooling_head(const VisionTower& v, TowerGroups& t) {
  const std::string head = "vision_tower.vision_model.head.";
  t.add(head + "probe", 1, v.hidden);
  t.add(head + "attention.in_proj_weight", checked_mul(3, v.hidden), v.hidden);
  t.add(head + "attention.in_proj_bias", 1, checked_mul(3, v.hidden));
  t.linear(head + "attention.out_proj", v.hidden, v.hidden);
  t.layer_norm(head + "layernorm", v.hidden);
  t.linear(head + "mlp.fc1", v.intermediate, v.hidden);
  t.linear(head + "mlp.fc2", v.hidden, v.intermediate);
}

// The tower's and its projector's tensors in parameters() order, every one frozen and fed to no
// matmul of a text-only step (no autocast copy, no LoRA target); empty when there is no tower.
std::vector<TensorGroup> vision_tower_groups(const VisionTower& v) {
  if (v.layers == 0) return {};
  TowerGroups t;
  const std::string embeddings = "vision_tower.vision_model.embeddings.";
  // Conv2d(channels, hidden, kernel = stride = patch): hidden x channels x patch x patch.
  t.add(embeddings + "patch_embedding.weight", v.hidden,
        checked_mul(v.channels, checked_mul(v.patch, v.patch)));
  t.add(embeddings + "patch_embedding.bias", 1, v.hidden);
  const u64 side = v.image / v.patch;
  t.add(embeddings + "position_embedding.weight", checked_mul(side, side), v.hidden);
  encoder_layers(v, t);
  t.layer_norm("vision_tower.vision_model.post_layernorm", v.hidden);
  if (v.pooling_head) pooling_head(v, t);
  if (v.projector_out > 0) {
    // mm_input_projection_weight (vision width x text width) and mm_soft_emb_norm, an RMSNorm
    // of the vision width.
    t.add("multi_modal_projector.mm_input_projection_weight", v.hidden, v.projector_out);
    t.add("multi_modal_projector.mm_soft_emb_norm.weight", 1, v.hidden);
  }
  return t.take();
}

// A multimodal checkpoint's vision tower comes first in parameters(), before the language model
// (Gemma3ForConditionalGeneration: vision_tower, multi_modal_projector, language_model).
Inventory with_vision_tower(const VisionTower& v, Inventory text) {
  std::vector<TensorGroup> groups = vision_tower_groups(v);
  if (groups.empty()) return text;
  groups.insert(groups.end(), std::make_move_iterator(text.groups.begin()),
                std::make_move_iterator(text.groups.end()));
  text.groups = std::move(groups);
  return text;
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
    const std::string_view head = detail::family_of(a.model_type).names.lm_head;
    if (!a.tied_embeddings) {
      b.linear(head, Role::head, a.vocab_size, a.embedding_dim, 1, bias_if(a.lm_head_bias),
               "lm_head");
    } else if (a.lm_head_bias) {
      b.add(cat(head, ".bias"), Role::head, 1, a.vocab_size, 1);
    }
  }
  return with_vision_tower(a.vision, b.take());
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
