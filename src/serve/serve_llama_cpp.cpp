// llama.cpp's KV cache, as llama_kv_cache_init (src/llama-kv-cache.cpp of the 2024-2025 builds,
// e.g. the copy beside llama_kv_cache_get_padding) sizes it: one K and one V tensor per layer of
// n_embd_k_gqa x kv_size and n_embd_v_gqa x kv_size elements, each ggml_row_size(type, n): whole
// blocks of the cache type (ggml's type traits, ggml/src/ggml.c: blck_size and type_size).
// kv_size is the context padded to 256 cells with flash attention and to 32 without
// (llama_kv_cache_get_padding). Every layer keeps the whole context (sliding windows ignored,
// as the builds before the iSWA cache do); --parallel slots share it (the unified cache).
#include "serve/serve_gguf.hpp"

#include <memest/error.hpp>
#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

namespace memest {
namespace {

// data table
constexpr std::array<GgmlType, 9> kCacheTypes = {{
    {"f32", 1, 4},
    {"f16", 1, 2},
    {"bf16", 1, 2},
    {"q8_0", 32, 34},  // 32 int8 + an fp16 scale
    {"q4_0", 32, 18},  // 32 4-bit + an fp16 scale
    {"q4_1", 32, 20},  // + an fp16 minimum
    {"q5_0", 32, 22},  // + 32 high bits
    {"q5_1", 32, 24},
    {"iq4_nl", 32, 18},  // non-linear 4-bit, an fp16 scale
}};

const GgmlType& cache_type(std::string_view name, std::string_view flag) {
  for (const GgmlType& t : kCacheTypes) {
    if (t.name == name) return t;
  }
  throw Error(fmt::format("{}: unknown cache type \"{}\" (expected one of: {})", flag, name,
                          fmt::join(ggml_cache_type_names(), ", ")));
}

// ggml_row_size: whole blocks of the type.
u64 row_bytes(const GgmlType& t, u64 elements) {
  if (elements % t.block != 0) {
    throw Error(fmt::format("cache type {}: a row of {} elements is not whole blocks of {}", t.name,
                            elements, t.block));
  }
  return checked_mul(elements / t.block, t.bytes);
}

// The compute buffer of one micro-batch: ggml's graph allocator gives each f32 intermediate a
// buffer and frees it after its last use, reusing an input's buffer where the op can work in
// place (the softmax of KQ), so the peak is the widest of two moments of the worst-case graph
// llama.cpp reserves (n_kv = the whole cache, n_tokens = the micro-batch, every token an output):
// the attention without flash attention (KQ [n_kv x n_tokens x n_head], the mask [n_kv x
// n_tokens], the Q (or fused QKV) projection and the attention output, beside the layer's input
// and residual [n_embd x n_tokens]), and the output (logits [n_vocab x n_tokens] beside the
// same two hidden states) when the output layer is on the GPU. Not counted: what the MoE
// experts' matmuls and MLA's absorbed attention keep.
struct ComputeBuffer {
  u64 bytes = 0;
  std::string basis;
};

ComputeBuffer compute_buffer(const Architecture& a, u64 n_kv, u64 tokens, bool flash_attn,
                             bool output_on_gpu) {
  const u64 f32 = 4;
  const u64 hidden = checked_mul(checked_mul(2 * a.hidden_size, tokens), f32);
  const u64 q_width =
      a.fused_qkv ? (a.num_heads + 2 * a.num_kv_heads) * a.head_dim : a.num_heads * a.head_dim;
  u64 attention = checked_add(
      hidden, checked_mul(checked_mul(q_width + a.num_heads * a.head_dim, tokens), f32));
  attention = checked_add(attention, checked_mul(checked_mul(n_kv, tokens), flash_attn ? 2 : f32));
  if (!flash_attn) {
    attention = checked_add(attention,
                            checked_mul(checked_mul(checked_mul(n_kv, tokens), a.num_heads), f32));
  }
  const u64 output =
      output_on_gpu ? checked_add(hidden, checked_mul(checked_mul(a.vocab_size, tokens), f32)) : 0;
  ComputeBuffer c;
  c.bytes = std::max(attention, output);
  c.basis =
      output >= attention
          ? fmt::format("logits of {} tokens x {} vocab in f32", tokens, a.vocab_size)
          : fmt::format("KQ of {} cells x {} tokens x {} heads in f32", n_kv, tokens, a.num_heads);
  if (flash_attn && output < attention) c.basis = "the attention's inputs and output";
  return c;
}

// The weights of a GGUF file type: what the GPU holds, and a note of the host's share.
void add_weights(ServeEstimate& e, const ServeModel& m, const LlamaCppSettings& s) {
  const GgufWeights w = gguf_weights(m, s.quantization, s.n_gpu_layers);
  e.weights_bytes = w.device_bytes;
  std::vector<std::string> counts;
  for (const auto& [type, n] : w.tensors_by_type) counts.push_back(fmt::format("{} {}", n, type));
  e.weights_basis = fmt::format("{}: {} tensors", s.quantization, fmt::join(counts, " + "));
  e.notes.push_back(fmt::format(
      "{} of weights in host memory (token_embd{})", format_bytes(w.host_bytes, Unit::MiB),
      s.n_gpu_layers < m.spec.arch->num_layers ? " and the CPU layers" : ""));
}

}  // namespace

std::span<const GgmlType> ggml_cache_types() { return kCacheTypes; }

std::span<const std::string_view> ggml_cache_type_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    v.reserve(kCacheTypes.size());
    for (const GgmlType& t : kCacheTypes) v.push_back(t.name);
    return v;
  }();
  return names;
}

ServeEstimate estimate_llama_cpp(const ServeModel& m, const LlamaCppSettings& s) {
  const Architecture& a = *m.spec.arch;
  const GgmlType& tk = cache_type(s.cache_type_k, "--cache-type-k");
  const GgmlType& tv = cache_type(s.cache_type_v, "--cache-type-v");
  if (tv.block > 1 && !s.flash_attn) {
    throw Error(
        fmt::format("--cache-type-v: {} needs --flash-attn (llama.cpp quantises V only "
                    "with flash attention)",
                    tv.name));
  }
  ServeEstimate e;
  e.engine = ServeEngine::llama_cpp;
  e.model = m.spec.name;
  const u64 ctx = s.ctx_size > 0 ? s.ctx_size : m.max_positions;
  if (ctx == 0) throw Error("--ctx-size: the config has no max_position_embeddings");
  e.context = ceil_div(ctx, s.flash_attn ? 256 : 32) * (s.flash_attn ? 256 : 32);
  // n_embd_k_gqa / n_embd_v_gqa: heads x head width; without an MLA cache DeepSeek's keys are
  // qk_nope + qk_rope wide and its values v_head_dim, for every head. With one (ik_llama.cpp's
  // -mla 2/3) the K cache holds the latent and the rotary key, kv_lora_rank + qk_rope_head_dim,
  // and there is no V cache.
  const bool mla_model = a.kv_lora_rank > 0;
  if (s.mla && !mla_model) throw Error("--mla: the model has no multi-head latent attention");
  const u64 k_width = s.mla       ? a.kv_lora_rank + a.qk_rope_head_dim
                      : mla_model ? a.num_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
                                  : a.num_kv_heads * a.head_dim;
  const u64 v_width = s.mla       ? 0
                      : mla_model ? a.num_heads * a.v_head_dim
                                  : a.num_kv_heads * a.head_dim;
  const u64 per_layer = checked_add(row_bytes(tk, checked_mul(k_width, e.context)),
                                    row_bytes(tv, checked_mul(v_width, e.context)));
  const u64 gpu_layers = std::min(s.n_gpu_layers, a.num_layers);
  e.kv_bytes = checked_mul(per_layer, gpu_layers);
  e.kv_tokens = e.context;
  e.kv_bytes_per_token = e.kv_bytes / e.context;
  e.kv_basis = fmt::format("{} cells x {} layers x (K {} x {} + V {} x {})", e.context, gpu_layers,
                           k_width, tk.name, v_width, tv.name);
  if (gpu_layers < a.num_layers) {
    e.notes.push_back(fmt::format(
        "the KV cache of {} layers ({}) stays in host memory", a.num_layers - gpu_layers,
        format_bytes(per_layer * (a.num_layers - gpu_layers), Unit::MiB)));
  }
  const u64 tokens = std::min({s.ubatch_size, s.batch_size, e.context});
  const ComputeBuffer c =
      compute_buffer(a, e.context, tokens, s.flash_attn, s.n_gpu_layers > a.num_layers);
  if (gpu_layers > 0 || s.n_gpu_layers > a.num_layers) {
    e.compute_buffer_bytes = c.bytes;
    e.compute_basis = c.basis;
  }
  if (!s.quantization.empty()) add_weights(e, m, s);
  if (m.attention.sliding > 0) {
    e.notes.push_back("sliding-window layers keep the whole context (no iSWA cache modelled)");
  }
  return e;
}

}  // namespace memest
