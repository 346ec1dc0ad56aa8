// The prompt graph of an MLA model in ik_llama.cpp (build_deepseek2, llm_build_moe_ffn and
// llm_build_ffn in src/llama.cpp of ikawrakow/ik_llama.cpp at 1843ed22), tensor by tensor in the
// order its ggml_build_forward_expand calls place them, and each device's buffer from it
// (src/serve/ik_mla_graph.hpp).
//
// The path's buffers are large because of that order: for each group of heads the loop expands
// the group's f16 keys and values (the f32 product of wkv_b and the cached latent, cast) at once,
// but reaches the group's flash attention only from the layer's output, after the loop; so the
// keys and values of every head of the layer are alive together before the first attention runs.
#include "serve/ik_mla_graph.hpp"

#include "serve/ggml_graph.hpp"

#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>

namespace memest {

namespace {

using Id = GgmlGraph::Id;
constexpr int kLayerDevice = -2;            // a layer's experts computed on the layer's own device
constexpr std::uint64_t kMaxNodes = 65536;  // llama_model_max_nodes
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

class MlaGraph {
 public:
  MlaGraph(const Architecture& a, const LlamaCppPlacement& p, const LlamaCppSettings& s,
           std::uint64_t n_kv, std::uint64_t tokens)
      : a_(a), p_(p), s_(s), n_kv_(n_kv), t_(tokens), w_(g_.external()) {}
  void build(const std::vector<bool>& host_experts, bool gpu_takes);
  const GgmlGraph& graph() const { return g_; }

 private:
  std::uint64_t f32(std::uint64_t width) const { return ggml_bytes({width, t_, 4}); }
  Id norm(int d, Id x) { return g_.op(d, f32(a_.hidden_size), {x, w_}); }  // ggml_fused_rms_norm
  Id mask(int d);
  Id queries(int d, Id normed, Id pos);
  void cache_write(int d, Id normed, Id pos);
  Id attention(int d, Id normed, Id pos);
  Id ffn(int d, Id x, std::uint64_t width);
  Id moe(int d, Id x, int xd);
  Id layer(std::uint64_t il, Id x, Id pos, int xd);
  void check_nodes() const;

  const Architecture& a_;
  const LlamaCppPlacement& p_;
  const LlamaCppSettings& s_;
  std::uint64_t n_kv_, t_;
  GgmlGraph g_;
  Id w_;  // the weights and the KV cache: in no compute buffer
  Id mask_f32_ = 0;
  std::optional<Id> mask_;  // the f16 cast, made where the first attention runs
};

void MlaGraph::check_nodes() const {
  if (g_.nodes() <= kMaxNodes) return;
  throw Error(fmt::format(
      "--attention-max-batch: ik_llama.cpp's graph holds at most {} nodes (llama_model_max_nodes) "
      "and the MLA prompt graph of {} layers over {} cells, its {} heads in groups of {}, needs "
      "more: give a larger --attention-max-batch or a smaller --ctx-size",
      kMaxNodes, a_.num_layers, n_kv_, a_.num_heads,
      mla_group_heads(a_, s_.attn_max_batch, n_kv_)));
}

// build_inp_KQ_mask: with flash attention the f32 input is cast to f16 where the first
// attention runs.
Id MlaGraph::mask(int d) {
  if (!mask_) mask_ = g_.op(d, kq_mask_f32(n_kv_, t_) / 2, {mask_f32_});
  return *mask_;
}

// The queries, [qk_rope + qk_nope] x heads x tokens f32: the rotary part roped, then the two
// concatenated (through q_a, its norm and q_b where the model has q_lora_rank).
Id MlaGraph::queries(int d, Id normed, Id pos) {
  const std::uint64_t head = a_.qk_nope_head_dim + a_.qk_rope_head_dim;
  Id q = normed;
  if (a_.q_lora_rank > 0) {
    q = g_.op(d, f32(a_.q_lora_rank), {w_, normed});
    q = g_.op(d, f32(a_.q_lora_rank), {q, w_});
  }
  q = g_.op(d, f32(a_.num_heads * head), {w_, q});
  const Id nope = g_.view(q, f32(a_.num_heads * a_.qk_nope_head_dim));
  const Id rope = g_.view(q, f32(a_.num_heads * a_.qk_rope_head_dim));
  const Id roped =
      g_.op(d, f32(a_.num_heads * a_.qk_rope_head_dim), {rope, pos}, GgmlGraph::Reuse::in_place);
  return g_.view(g_.op(d, f32(a_.num_heads * head), {roped, nope}), f32(a_.num_heads * head));
}

// The latent and the rotary key of the tokens, normed and roped, written into the cache.
void MlaGraph::cache_write(int d, Id normed, Id pos) {
  const std::uint64_t width = a_.kv_lora_rank + a_.qk_rope_head_dim;
  const Id kv = g_.op(d, f32(width), {w_, normed});  // wkv_a_mqa
  const Id k_rope = g_.view(kv, f32(a_.qk_rope_head_dim));
  const Id roped = g_.op(d, f32(a_.qk_rope_head_dim), {k_rope, pos}, GgmlGraph::Reuse::in_place);
  const Id latent = g_.op(d, f32(a_.kv_lora_rank), {g_.view(kv, f32(a_.kv_lora_rank)), w_});
  const Id kvr = g_.op(d, f32(width), {g_.view(roped, f32(a_.qk_rope_head_dim)), latent});
  g_.expand(g_.write(kvr, g_.view(w_, 0)));
}

// The prompt path: per group of heads, wkv_b times the cached latent in f32, its keys and
// values cast to f16, the keys beside the shared rotary key repeated per head; then one flash
// attention per group, the outputs concatenated; wo.
Id MlaGraph::attention(int d, Id normed, Id pos) {
  cache_write(d, normed, pos);
  const std::uint64_t heads = mla_group_heads(a_, s_.attn_max_batch, n_kv_);
  const std::uint64_t nope = a_.qk_nope_head_dim, rope = a_.qk_rope_head_dim, v = a_.v_head_dim;
  const Id rope_f16 = g_.op(d, ggml_bytes({rope, n_kv_, 2}), {w_});
  const Id k_rope = g_.op(d, ggml_bytes({rope, n_kv_, heads, 2}), {rope_f16});  // ggml_repeat
  const Id q = queries(d, normed, pos);
  g_.expand(q);
  std::vector<Id> keys, values;
  for (std::uint64_t h = 0; h < a_.num_heads; h += heads) {
    const Id kv = g_.op(d, ggml_bytes({heads, nope + v, n_kv_, 4}), {w_, w_});
    const Id k_nope = g_.op(d, ggml_bytes({nope, n_kv_, heads, 2}), {g_.view(kv, 0)});
    const Id value = g_.op(d, ggml_bytes({v, n_kv_, heads, 2}), {g_.view(kv, 0)});
    g_.expand(k_nope);
    g_.expand(value);
    keys.push_back(g_.op(d, ggml_bytes({rope + nope, n_kv_, heads, 2}), {k_rope, k_nope}));
    values.push_back(value);
    g_.expand(keys.back());
    check_nodes();
  }
  Id out = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const Id kqv = g_.op(d, f32(v * heads), {g_.view(q, 0), keys[i], values[i], mask(d)});
    const Id flat = g_.view(kqv, f32(v * heads));
    out = i == 0 ? flat : g_.op(d, f32(v * heads * (i + 1)), {out, flat});
  }
  g_.expand(out);
  return g_.op(d, f32(a_.hidden_size), {w_, out});
}

// llm_build_ffn, gated: up, gate, then ik_llama.cpp's ggml_fused_mul_unary into a new tensor.
Id MlaGraph::ffn(int d, Id x, std::uint64_t width) {
  const Id up = g_.op(d, f32(width), {w_, x});
  const Id gate = g_.op(d, f32(width), {w_, x});
  return g_.op(d, f32(a_.hidden_size), {w_, g_.op(d, f32(width), {gate, up})});
}

// llm_build_moe_ffn with DeepSeek-V3's router (sigmoid scores, the selection bias added to a
// copy, the chosen weights normalised and scaled; V2's softmax router makes one [n_expert x
// tokens] f32 tensor fewer); the experts on device `xd` (the layer's, the host's, or the first
// GPU's when it takes over experts kept in host memory), then the shared experts and the sum.
// The chosen weights and their product with the experts follow the experts in the graph's
// order, so they run where the experts ran when that is a GPU (the scheduler's "expand gpu
// down" pass), and on the layer's device after the host (its "expand gpu up" pass).
Id MlaGraph::moe(int d, Id x, int xd) {
  const std::uint64_t k = a_.experts_per_token, e = a_.num_experts;
  const Id logits = g_.op(d, f32(e), {w_, x});
  const Id probs = g_.op(d, f32(e), {logits}, GgmlGraph::Reuse::in_place);
  const Id chosen = g_.view(
      g_.op(d, f32(e), {g_.op(d, f32(e), {probs, w_}, GgmlGraph::Reuse::in_place)}), f32(k));
  const std::uint64_t width = a_.moe_intermediate_size;
  Id par = 0;
  if (s_.fused_moe) {
    par = g_.op(xd, f32(width * k), {w_, w_, x, chosen});  // ggml_moe_up_gate
  } else {
    const Id up = g_.op(xd, f32(width * k), {w_, x, chosen});
    const Id gate = g_.op(xd, f32(width * k), {w_, x, chosen});
    par = g_.op(xd, f32(width * k), {gate, up});
  }
  const Id experts = g_.op(xd, f32(a_.hidden_size * k), {w_, par, chosen});
  const int wd = xd == kLlamaHost ? d : xd;
  const Id picked = g_.view(g_.op(wd, f32(k), {g_.view(probs, f32(e)), chosen}), f32(k));
  const Id normed =
      g_.op(wd, f32(k), {picked, g_.op(wd, f32(1), {picked})}, GgmlGraph::Reuse::in_place);
  const Id scaled = g_.op(wd, f32(k), {g_.view(normed, f32(k))}, GgmlGraph::Reuse::in_place);
  const Id weighted =
      g_.op(wd, f32(a_.hidden_size * k), {experts, scaled}, GgmlGraph::Reuse::in_place);
  const Id moe_out = g_.op(wd, f32(a_.hidden_size), {g_.view(weighted, f32(a_.hidden_size))});
  if (a_.shared_expert_size == 0) return moe_out;
  return g_.op(d, f32(a_.hidden_size), {moe_out, ffn(d, x, a_.shared_expert_size)},
               GgmlGraph::Reuse::in_place);
}

Id MlaGraph::layer(std::uint64_t il, Id x, Id pos, int xd) {
  const int d = p_.layer_device[static_cast<std::size_t>(il)];
  Id residual = x;
  Id cur = attention(d, norm(d, x), pos);
  if (il + 1 == a_.num_layers) {  // inp_out_ids: every token an output in the reserved graph
    const Id ids = g_.input(ggml_bytes({t_, 4}));
    cur = g_.op(d, f32(a_.hidden_size), {cur, ids});
    residual = g_.op(d, f32(a_.hidden_size), {residual, ids});
  }
  const Id ffn_inp = g_.op(d, f32(a_.hidden_size), {cur, residual}, GgmlGraph::Reuse::in_place);
  const Id normed = norm(d, ffn_inp);
  const bool moe_layer = il >= a_.num_layers - std::min(a_.moe_layers, a_.num_layers);
  const Id out = moe_layer && a_.num_experts > 0 ? moe(d, normed, xd == kLayerDevice ? d : xd)
                                                 : ffn(d, normed, a_.intermediate_size);
  return g_.op(d, f32(a_.hidden_size), {out, ffn_inp}, GgmlGraph::Reuse::in_place);
}

void MlaGraph::build(const std::vector<bool>& host_experts, bool gpu_takes) {
  const Id tokens = g_.input(ggml_bytes({t_, 4}));
  Id x = g_.op(kLlamaHost, f32(a_.hidden_size), {w_, tokens});  // get_rows of token_embd
  const Id pos = g_.input(ggml_bytes({t_, 4}));
  mask_f32_ = g_.input(kq_mask_f32(n_kv_, t_));
  for (std::uint64_t il = 0; il < a_.num_layers; ++il) {
    const bool host = il < host_experts.size() && host_experts[static_cast<std::size_t>(il)];
    x = layer(il, x, pos, !host ? kLayerDevice : gpu_takes ? 0 : kLlamaHost);
  }
  const int od = p_.output_device;
  const Id logits = g_.op(od, f32(a_.vocab_size), {w_, norm(od, x)});
  g_.output(logits);
  g_.expand(logits);
}

}  // namespace

std::uint64_t kq_mask_f32(std::uint64_t n_kv, std::uint64_t tokens) {
  return ggml_bytes({n_kv, ceil_div(tokens, 32) * 32, 4});
}

bool mla_prompt_path(const Architecture& a, const LlamaCppSettings& s, const LlamaCppPlacement& p,
                     std::uint64_t tokens) {
  return a.kv_lora_rank > 0 && s.mla && s.flash_attn && tokens >= 128 && !p.row;
}

std::uint64_t mla_group_heads(const Architecture& a, std::uint64_t attn_max_batch,
                              std::uint64_t n_kv) {
  std::uint64_t heads = a.num_heads;
  std::uint64_t mib = ggml_bytes({a.num_heads, a.qk_nope_head_dim + a.v_head_dim, n_kv, 4}) / kMiB;
  if (attn_max_batch == 0) return heads;
  while (heads % 2 == 0 && mib > attn_max_batch) {
    heads /= 2;
    mib /= 2;
  }
  return heads;
}

std::vector<std::uint64_t> mla_prompt_buffers(const Architecture& a, const LlamaCppPlacement& p,
                                              const LlamaCppSettings& s, std::uint64_t n_kv,
                                              std::uint64_t tokens,
                                              const std::vector<bool>& host_experts, bool gpu_takes,
                                              std::uint64_t n_copies) {
  MlaGraph g(a, p, s, n_kv, tokens);
  g.build(host_experts, gpu_takes);
  return g.graph().buffers(p.names.size(), kCudaBufferAlignment, n_copies);
}

}  // namespace memest
