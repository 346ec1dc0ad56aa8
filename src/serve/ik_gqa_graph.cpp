// The graph of a Qwen3-MoE model in ik_llama.cpp with flash attention (build_qwen3moe,
// llm_build_kv, llm_build_kqv and llm_build_moe_ffn in src/llama.cpp of ikawrakow/ik_llama.cpp
// at 5236c98b, the build of the Qwen3-235B log), tensor by tensor in the order its
// ggml_build_forward_expand calls place them, each weight in the buffer it was loaded into, and
// each device's buffer from it (src/serve/ik_gqa_graph.hpp).
//
// Where an op's weight stays in host memory, ggml_backend_sched_backend_id_from_cur lets the
// first GPU take the op over when ggml_backend_cuda_offload_op agrees (32 rows or more; for the
// experts' ops, tokens x active experts at least 32 x the experts: ggml/src/ggml-cuda.cu at
// 5236c98b), and the scheduler copies the weight into that GPU's compute buffer at the start of
// a split of its own; ggml_gallocr frees the copy after the op, like any other tensor. Ops
// without a weight run where the op before them in the graph runs (the scheduler's "expand gpu
// down" pass).
#include "serve/ik_gqa_graph.hpp"

#include "serve/ggml_graph.hpp"
#include "serve/ik_mla_graph.hpp"

#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <optional>

namespace memest {

namespace {

using Id = GgmlGraph::Id;

class GqaGraph {
 public:
  GqaGraph(const Architecture& a, const LlamaCppPlacement& p, const LlamaCppSettings& s,
           const PlacedWeights& w, std::uint64_t n_kv, std::uint64_t tokens,
           std::uint64_t expert_from)
      : a_(a),
        p_(p),
        s_(s),
        w_(w),
        n_kv_(n_kv),
        t_(tokens),
        expert_from_(expert_from),
        cache_(g_.external()) {}
  void build();
  const GgmlGraph& graph() const { return g_; }

 private:
  std::uint64_t f32(std::uint64_t width) const { return ggml_bytes({width, t_, 4}); }
  // The weight `name` of layer `il` (none: a model-wide one): its id and the device of an op
  // of `rows` rows (ne[1]) reading it, or of an expert op when `experts`.
  struct Read {
    Id weight;
    int device;
  };
  Read weight(std::optional<std::uint64_t> il, const char* name, std::uint64_t rows,
              bool experts = false);
  Id weighted(Read r, std::uint64_t bytes, std::initializer_list<Id> srcs);
  Id follow(std::uint64_t bytes, std::initializer_list<Id> srcs, bool in_place = false) {
    return g_.op(cur_, bytes, srcs,
                 in_place ? GgmlGraph::Reuse::in_place : GgmlGraph::Reuse::never);
  }
  Id mask();
  Id head_projection(std::uint64_t il, const char* w, const char* norm, std::uint64_t heads, Id x,
                     Id pos);
  Id attention(std::uint64_t il, Id x, Id pos);
  Id moe(std::uint64_t il, Id x);
  Id layer(std::uint64_t il, Id x, Id pos);

  const Architecture& a_;
  const LlamaCppPlacement& p_;
  const LlamaCppSettings& s_;
  const PlacedWeights& w_;
  std::uint64_t n_kv_, t_;
  std::uint64_t expert_from_;  // the fewest tokens from which a GPU takes an expert op over
  GgmlGraph g_;
  Id cache_;  // the KV cache: in no compute buffer
  Id mask_f32_ = 0;
  std::optional<Id> mask_;
  int cur_ = kLlamaHost;  // the device of the last op with a weight
};

GqaGraph::Read GqaGraph::weight(std::optional<std::uint64_t> il, const char* name,
                                std::uint64_t rows, bool experts) {
  const std::string key =
      il ? fmt::format("blk.{}.{}.weight", *il, name) : fmt::format("{}.weight", name);
  const auto it = w_.find(key);
  const int at = it != w_.end() ? it->second.device
                 : il           ? p_.layer_device[static_cast<std::size_t>(*il)]
                                : p_.output_device;
  const Id id = it != w_.end() ? g_.weight(at, it->second.bytes) : g_.external();
  if (at != kLlamaHost) return {id, at};
  const bool offload = experts ? t_ >= expert_from_ : rows >= kCudaMinBatchOffload;
  return {id, offload ? 0 : kLlamaHost};
}

Id GqaGraph::weighted(Read r, std::uint64_t bytes, std::initializer_list<Id> srcs) {
  cur_ = r.device;
  return g_.op(r.device, bytes, srcs);
}

// build_inp_KQ_mask: with flash attention the f32 input is cast to f16 where the first
// attention runs.
Id GqaGraph::mask() {
  if (!mask_) mask_ = follow(kq_mask_f32(n_kv_, t_) / 2, {mask_f32_});
  return *mask_;
}

// Q or K: the projection, its per-head norm (ggml_fused_rms_norm, a new tensor) and rope in
// place, [head_dim x heads x tokens] f32.
Id GqaGraph::head_projection(std::uint64_t il, const char* w, const char* norm, std::uint64_t heads,
                             Id x, Id pos) {
  const std::uint64_t width = heads * a_.head_dim;
  const Read r = weight(il, w, t_);
  Id h = weighted(r, f32(width), {r.weight, x});
  if (a_.qk_norm) {
    const Read n = weight(il, norm, heads);
    h = weighted(n, f32(width), {g_.view(h, f32(width)), n.weight});
  }
  return follow(f32(width), {h, pos}, true);
}

// llm_build_kv: Q, K and V expanded together, K and V written into the cache, one flash
// attention over the cache's views, wo.
Id GqaGraph::attention(std::uint64_t il, Id x, Id pos) {
  const Id q = head_projection(il, "attn_q", "attn_q_norm", a_.num_heads, x, pos);
  g_.expand(q);
  const Id k = head_projection(il, "attn_k", "attn_k_norm", a_.num_kv_heads, x, pos);
  g_.expand(k);
  const Read rv = weight(il, "attn_v", t_);
  const Id v = weighted(rv, f32(a_.num_kv_heads * a_.head_dim), {rv.weight, x});
  g_.expand(v);
  g_.expand(g_.write(k, g_.view(cache_, 0)));
  g_.expand(g_.write(v, g_.view(cache_, 0)));
  const std::uint64_t width = a_.num_heads * a_.head_dim;
  const Id kqv =
      follow(f32(width), {g_.view(q, 0), g_.view(cache_, 0), g_.view(cache_, 0), mask()});
  const Id flat = g_.view(kqv, f32(width));
  g_.expand(flat);
  const Read wo = weight(il, "attn_output", t_);
  return weighted(wo, f32(a_.hidden_size), {wo.weight, flat});
}

// llm_build_moe_ffn with a softmax router and the chosen weights normalised (Qwen3-MoE): the
// experts' gated product (ggml_moe_up_gate under --fused-moe, else up, gate and ik_llama.cpp's
// fused_mul_unary into a new tensor), the down projection, weighted in place and summed.
Id GqaGraph::moe(std::uint64_t il, Id x) {
  const std::uint64_t k = a_.experts_per_token, e = a_.num_experts;
  const Read router = weight(il, "ffn_gate_inp", t_);
  const Id probs = follow(f32(e), {weighted(router, f32(e), {router.weight, x})}, true);
  const Id chosen = g_.view(follow(f32(e), {probs}), f32(k));  // argsort, top k
  const Id picked = follow(f32(k), {g_.view(probs, f32(e)), chosen});
  const Id sum = follow(f32(1), {g_.view(picked, f32(k))});
  const Id normed = follow(f32(k), {g_.view(picked, f32(k)), sum}, true);
  const Id x3 = g_.view(x, f32(a_.hidden_size));
  const std::uint64_t width = a_.moe_intermediate_size;
  const Read up = weight(il, "ffn_up_exps", 0, true);
  const Read gate = weight(il, "ffn_gate_exps", 0, true);
  Id par = 0;
  if (s_.fused_moe) {
    par = weighted(up, f32(width * k), {up.weight, gate.weight, x3, chosen});
  } else {
    const Id u = weighted(up, f32(width * k), {up.weight, x3, chosen});
    const Id g = weighted(gate, f32(width * k), {gate.weight, x3, chosen});
    par = follow(f32(width * k), {g, u});
  }
  const Read down = weight(il, "ffn_down_exps", 0, true);
  const Id experts = weighted(down, f32(a_.hidden_size * k), {down.weight, par, chosen});
  const Id scaled = follow(f32(a_.hidden_size * k), {experts, g_.view(normed, f32(k))}, true);
  return follow(f32(a_.hidden_size), {g_.view(scaled, f32(a_.hidden_size))});
}

Id GqaGraph::layer(std::uint64_t il, Id x, Id pos) {
  Id residual = x;
  const Read an = weight(il, "attn_norm", t_);
  Id cur = attention(il, weighted(an, f32(a_.hidden_size), {x, an.weight}), pos);
  if (il + 1 == a_.num_layers) {  // inp_out_ids: every token an output in the reserved graph
    const Id ids = g_.input(ggml_bytes({t_, 4}));
    cur = follow(f32(a_.hidden_size), {cur, ids});
    residual = follow(f32(a_.hidden_size), {residual, ids});
  }
  const Id ffn_inp = follow(f32(a_.hidden_size), {cur, residual}, true);
  const Read fn = weight(il, "ffn_norm", t_);
  const Id out = moe(il, weighted(fn, f32(a_.hidden_size), {ffn_inp, fn.weight}));
  return follow(f32(a_.hidden_size), {out, ffn_inp}, true);
}

void GqaGraph::build() {
  const Id tokens = g_.input(ggml_bytes({t_, 4}));
  Id x = g_.op(kLlamaHost, f32(a_.hidden_size), {g_.external(), tokens});  // token_embd rows
  const Id pos = g_.input(ggml_bytes({t_, 4}));
  mask_f32_ = g_.input(kq_mask_f32(n_kv_, t_));
  for (std::uint64_t il = 0; il < a_.num_layers; ++il) x = layer(il, x, pos);
  const Read norm = weight(std::nullopt, "output_norm", t_);
  const Read out = weight(std::nullopt, "output", t_);
  const Id logits = weighted(out, f32(a_.vocab_size),
                             {out.weight, weighted(norm, f32(a_.hidden_size), {x, norm.weight})});
  g_.output(logits);
  g_.expand(logits);
}

}  // namespace

PlacedWeights placed_weights(const std::vector<LlamaTensor>& tensors,
                             const std::vector<int>& devices) {
  PlacedWeights out;
  for (std::size_t i = 0; i < tensors.size() && i < devices.size(); ++i) {
    if (tensors[i].tied_copy) continue;
    PlacedWeight& w = out[tensors[i].name];
    w.device = devices[i];
    w.bytes = checked_add(w.bytes, tensors[i].bytes);
    w.layer = tensors[i].layer;
  }
  return out;
}

bool gqa_graph_path(const Architecture& a, const LlamaCppSettings& s, const LlamaCppPlacement& p,
                    const PlacedWeights& w) {
  if (!s.flash_attn || p.row || a.model_type != "qwen3_moe" || a.num_experts == 0) return false;
  if (std::find(p.layer_device.begin(), p.layer_device.end(), kLlamaHost) != p.layer_device.end()) {
    return false;
  }
  return std::any_of(w.begin(), w.end(), [](const auto& kv) {
    return kv.first.starts_with("blk.") && kv.second.device == kLlamaHost;
  });
}

std::vector<std::uint64_t> gqa_prompt_buffers(const Architecture& a, const LlamaCppPlacement& p,
                                              const LlamaCppSettings& s, const PlacedWeights& w,
                                              std::uint64_t n_kv, std::uint64_t tokens,
                                              std::uint64_t expert_from, std::uint64_t n_copies) {
  GqaGraph g(a, p, s, w, n_kv, tokens, expert_from);
  g.build();
  return g.graph().buffers(p.names.size(), kCudaBufferAlignment, n_copies);
}

}  // namespace memest
