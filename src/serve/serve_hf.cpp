// Hugging Face transformers' model.generate() on one GPU, read from huggingface/transformers at
// commit 004999d9 (src/transformers/cache_utils.py: DynamicLayer, DynamicSlidingWindowLayer,
// StaticLayer, StaticSlidingWindowLayer, Cache's offloading), with generation/utils.py's
// generate() of the same releases (logits_to_keep = 1 where the model takes it, since 4.45 as
// num_logits_to_keep and 4.50 as logits_to_keep; max_cache_length = max_length - 1), the Llama
// decoder (models/llama/modeling_llama.py: the layer, LlamaMLP, eager_attention_forward) and
// integrations/sdpa_attention.py (repeat_kv unless torch >= 2.5 takes GQA with no mask). The
// torch allocator's own peak is modelled: the live tensors at each moment, under no_grad.
#include "serve/serve_bnb.hpp"

#include <memest/error.hpp>
#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

// data table
constexpr std::array<std::string_view, 4> kHfDtypeNames = {"auto", "bfloat16", "float16",
                                                           "float32"};
// data table
constexpr std::array<std::string_view, 2> kHfQuantizationNames = {"bnb-4bit", "bnb-8bit"};
// data table
constexpr std::array<std::string_view, 3> kHfAttnImplementations = {"sdpa", "eager",
                                                                    "flash_attention_2"};
// data table
constexpr std::array<std::string_view, 4> kHfCacheImplementations = {"dynamic", "static",
                                                                     "offloaded", "quantized"};

// The sizes every term uses: B sequences of P prompt tokens generating N, the cache holding
// L = P + N - 1 tokens at the last forward (the last token is sampled, never fed back).
struct HfShape {
  u64 b = 0, p = 0, n = 0, last = 0, w = 0;
  u64 hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, inter = 0, vocab = 0;
  u64 full = 0, sliding = 0, window = 0;
  u64 experts = 0, top_k = 0, expert_inter = 0;  // MoE: routed experts, top-k, expert width
  bool dense_layers = true;                      // some layer has a dense MLP
  std::string attn;
  bool static_cache = false;
  bool offloaded = false;
  u64 dense_weight = 0;  // bnb 4-bit: the largest weight matmul_4bit dequantises, bytes
};

u64 mul3(u64 a, u64 b, u64 c) { return checked_mul(checked_mul(a, b), c); }
u64 mul4(u64 a, u64 b, u64 c, u64 d) { return checked_mul(mul3(a, b, c), d); }

// K or V of one token in one layer of one sequence.
u64 half_token(const HfShape& s) { return mul3(s.kv_heads, s.head_dim, s.w); }

// transformers' replace_with_bnb_linear: every nn.Linear except get_keys_to_not_convert's
// (lm_head, the output embedding) becomes Linear4bit or Linear8bitLt, routers and experts
// included; the embeddings and norms stay in the model dtype.
bool hf_bnb_linear(const TensorGroup& g) {
  return g.matmul && g.rows > 1 && g.role != Role::embedding && g.kind != "lm_head";
}

struct HfWeights {
  u64 bytes = 0;
  u64 largest = 0;  // elements of the largest quantised weight
  std::string basis;
};

// from_pretrained's weights in torch_dtype; with a BitsAndBytesConfig(load_in_4bit=True) at its
// defaults (bnb_4bit_quant_type "fp4", no double quantisation, blocks of 64) each linear weight
// keeps Params4bit's packed pairs, an fp32 absmax per block and the 16-entry code; with
// load_in_8bit, Int8Params' int8 rows and an fp32 SCB per row.
HfWeights hf_weights(const ServeModel& m, Dtype dtype, const std::string& quant) {
  const BnbQuant b{.eight = quant == "bnb-8bit", .double_quant = false};
  HfWeights w;
  u64 quantised = 0;
  for (const TensorGroup& g : m.spec.inventory.groups) {
    const u64 n = g.tensor_elements();
    if (!quant.empty() && hf_bnb_linear(g)) {
      w.bytes = checked_add(w.bytes, checked_mul(bnb_bytes(b, g.rows, n), g.count));
      quantised = checked_add(quantised, checked_mul(n, g.count));
      w.largest = std::max(w.largest, n);
      continue;
    }
    w.bytes = checked_add(w.bytes, mul3(n, g.count, width(dtype)));
  }
  w.basis = quant.empty() ? fmt::format("the parameters in {}", dtype_name(dtype))
                          : fmt::format("{} linear weights in {} (bitsandbytes), the rest in {}",
                                        format_count(quantised),
                                        b.eight ? "int8 with an fp32 SCB per row"
                                                : "4-bit blocks of 64 with an fp32 absmax",
                                        dtype_name(dtype));
  return w;
}

// What the cache holds at the moments that matter, on the device.
struct HfCache {
  u64 prefill = 0;  // after the prompt's forward has filled every layer
  u64 final = 0;    // at the last forward, every layer updated
  u64 growth = 0;   // a torch.cat's old tensor beside its result (DynamicLayer.update)
  u64 host = 0;     // offloaded: the whole cache in host memory
  u64 tokens = 0;   // tokens per sequence the final cache holds
};

// DynamicCache(config=...): a full layer grows by torch.cat to L tokens; a sliding layer keeps a
// view of the last window - 1 tokens of the cat's result, whose storage (min(L, window) tokens;
// the whole prompt after prefill) stays alive. At the last layer's cat the old tensor (L - 1
// tokens, or min(L - 1, window) for a sliding layer) lives beside the new one.
HfCache dynamic_cache(const HfShape& s) {
  const u64 t = 2 * half_token(s);
  HfCache c;
  c.tokens = s.last;
  c.prefill = mul4(s.b, s.p, t, s.full + s.sliding);
  if (s.n < 2) {
    c.final = c.prefill;
    return c;
  }
  const u64 slide = std::min(s.last, s.window);
  c.final = checked_mul(checked_mul(s.b, t),
                        checked_add(checked_mul(s.full, s.last), checked_mul(s.sliding, slide)));
  const u64 old_full = s.full > 0 ? s.last - 1 : 0;
  const u64 old_slide = s.sliding > 0 ? std::min(s.last - 1, s.window) : 0;
  c.growth = mul3(s.b, std::max(old_full, old_slide), half_token(s));
  return c;
}

// StaticCache: every layer allocates max_cache_len = max_length - 1 = L tokens up front
// (StaticLayer.lazy_initialization), a sliding layer min(window, L); updates are in place.
HfCache static_cache(const HfShape& s) {
  HfCache c;
  c.tokens = s.last;
  const u64 slide = std::min(s.window, s.last);
  c.prefill = checked_mul(mul3(s.b, 2, half_token(s)),
                          checked_add(checked_mul(s.full, s.last), checked_mul(s.sliding, slide)));
  c.final = c.prefill;
  return c;
}

// DynamicCache(config=..., offloading=True) ("offloaded"; offload_only_non_sliding is False, so
// every layer moves): each layer goes to the host after its update, and Cache.update prefetches
// the next one. On the device at the last step are the layer being updated (its new K and V, and
// the old V beside the new) and the next layer, each at the larger kind's size (a full layer's
// L, a sliding layer's min(L, window)); after the prompt, the one layer of P tokens. The host
// keeps a full layer's L tokens and a sliding layer's view, window - 1.
HfCache offloaded_cache(const HfShape& s) {
  const u64 t = 2 * half_token(s);
  HfCache c;
  c.tokens = s.last;
  c.prefill = mul3(s.b, s.p, t);
  const u64 host_slide = std::min(s.last, s.window > 0 ? s.window - 1 : 0);
  c.host = checked_mul(checked_mul(s.b, t), checked_add(checked_mul(s.full, s.last),
                                                        checked_mul(s.sliding, host_slide)));
  if (s.n < 2) {
    c.final = c.prefill;
    return c;
  }
  const u64 now = s.full > 0 ? s.last : std::min(s.last, s.window);
  const u64 next = s.full > 0 ? s.last - 1 : std::min(s.last - 1, s.window);
  c.final = checked_mul(s.b, checked_add(checked_mul(now, t), checked_mul(next, t)));
  c.growth = mul3(s.b, next, half_token(s));
  return c;
}

// The keys one attention layer attends over and whether it gets a mask tensor: a dynamic cache
// returns the whole states (a sliding layer the window's, W tokens in decode), a static one its
// whole allocation. sdpa skips the mask (is_causal) for a full layer of a dynamic cache with no
// padding (masking_utils' _ignore_causal_mask_sdpa), not for a window or a static cache.
struct KeySpan {
  u64 keys = 0;
  bool masked = false;
};

KeySpan key_span(const HfShape& s, bool sliding, u64 q, u64 cached) {
  if (s.static_cache) {
    if (!sliding) return {s.last, true};
    const u64 alloc = std::min(s.window, s.last);
    return {q > alloc ? q : alloc, true};
  }
  const u64 total = cached + q;
  if (!sliding) return {total, false};
  const u64 keys = q > 1 ? total : std::min(total, s.window);
  return {keys, keys >= s.window};
}

// One attention layer's tensors beside the cache at its widest moment, q query tokens over
// `k` keys: eager (eager_attention_forward) holds q, repeat_kv's copies of K and V (GQA), the
// float mask and the scores at softmax's cast (the scores, their fp32 softmax and its cast);
// sdpa and flash_attention_2 the query and the output, sdpa with a mask also the boolean mask
// and repeat_kv's copies.
u64 attention_bytes(const HfShape& s, u64 q, KeySpan span) {
  const u64 query = mul4(s.b, q, s.heads, s.head_dim) * s.w;
  const u64 repeated =
      s.heads > s.kv_heads ? mul4(2 * s.b, s.heads, span.keys, s.head_dim) * s.w : 0;
  if (s.attn == "eager") {
    const u64 scores = mul4(s.b, s.heads, q, span.keys);
    return query + repeated + mul4(s.b, q, span.keys, s.w) + checked_mul(scores, 2 * s.w + 4);
  }
  if (s.attn == "sdpa" && span.masked) return 2 * query + mul3(s.b, q, span.keys) + repeated;
  return 2 * query;
}

// The MoE block's expert loop (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock) at one expert,
// for T tokens: the router's logits, top-k's weights (fp32 softmax cast back) and indices
// (int64), the zeroed output, one_hot's expert mask (E x k x T int64), and the expert's input
// rows and its act(gate), up and product. An expert gets each token at most once: every token,
// the bound taken here.
u64 moe_bytes(const HfShape& s, u64 tokens) {
  const u64 router = mul3(tokens, s.experts, s.w);
  const u64 topk = mul3(tokens, s.top_k, s.w + 8);
  const u64 rows = mul3(2, tokens, s.hidden) * s.w;  // the output and the expert's input
  const u64 mask = mul4(s.experts, s.top_k, tokens, 8);
  const u64 mlp = mul4(3, tokens, s.expert_inter, s.w);
  return checked_add(checked_add(router, topk), checked_add(checked_add(rows, mask), mlp));
}

struct HfMoment {
  u64 bytes = 0;
  std::string what;
};

void hf_widest(HfMoment& m, u64 bytes, std::string what) {
  if (bytes > m.bytes) m = {bytes, std::move(what)};
}

// The forward's tensors beside the cache for q tokens a sequence with `cached` tokens before
// them: the residual stream and the normed input (and the rotary cos/sin) under every moment;
// the cache update (the projected K and V, and `growth`); each kind of attention layer; the MLP
// (act(gate), up and their product: LlamaMLP's down_proj input); the logits of the last token
// (logits_to_keep = 1) in the model dtype and generate's fp32 copy.
HfMoment forward_moment(const HfShape& s, u64 q, u64 cached, u64 growth) {
  const u64 base = checked_add(mul4(2, s.b, q, s.hidden) * s.w, mul4(2, s.b, q, s.head_dim) * s.w);
  const u64 query = mul4(s.b, q, s.heads, s.head_dim) * s.w;
  HfMoment m;
  hf_widest(m, base + query + mul3(s.b, q, 2 * half_token(s)) + growth, "the cache update");
  for (const bool sliding : {false, true}) {
    if ((sliding ? s.sliding : s.full) == 0) continue;
    hf_widest(m, base + attention_bytes(s, q, key_span(s, sliding, q, cached)),
              fmt::format("{} attention", s.attn));
  }
  if (s.dense_layers) hf_widest(m, base + mul4(3, s.b, q, s.inter) * s.w, "the MLP");
  if (s.experts > 0) hf_widest(m, base + moe_bytes(s, checked_mul(s.b, q)), "the MoE block");
  if (s.dense_weight > 0 && s.b * q > 1) {
    const u64 inter = s.dense_layers ? s.inter : s.expert_inter;
    hf_widest(m, base + mul4(2, s.b, q, inter) * s.w + s.dense_weight,
              "the MLP with a dequantised 4-bit weight");
  }
  hf_widest(m, checked_add(mul4(s.b, q, s.hidden, s.w), mul3(s.b, s.vocab, s.w + 4)), "the logits");
  return m;
}

// Settings transformers refuses or memest does not model, each in one line.
void check_hf_settings(const ServeModel& m, const HfSettings& s, Dtype dtype) {
  if (s.prompt_len == 0) throw Error("--prompt-len: give the prompt's tokens (input_ids' length)");
  if (s.max_new_tokens == 0) throw Error("--max-new-tokens: give the tokens to generate");
  if (s.batch_size == 0) throw Error("--batch-size: expected at least 1 sequence");
  if (m.spec.checkpoint_quant) {
    throw Error(fmt::format(
        "--engine hf: the checkpoint's quantization_config ({}) is not modelled; give an "
        "unquantised checkpoint (with --quantization bnb-4bit or bnb-8bit)",
        m.spec.checkpoint_quant->method));
  }
  if (m.spec.arch->fused_experts) {
    throw Error("--engine hf: fused 3-D experts (gpt-oss) are not modelled");
  }
  if (m.spec.arch->kv_lora_rank > 0) {
    throw Error("--engine hf: an MLA model's cache (keys decompressed per head) is not modelled");
  }
  if (s.cache_implementation == "quantized") {
    throw Error(
        "--cache-implementation quantized: not modelled (quanto's and HQQ's packed layouts)");
  }
  if (s.attn_implementation == "flash_attention_2" && dtype == Dtype::fp32) {
    throw Error("--attn-implementation flash_attention_2: runs in float16 or bfloat16 only");
  }
}

HfShape hf_shape(const ServeModel& m, const HfSettings& s, Dtype dtype, u64 dense) {
  const Architecture& a = *m.spec.arch;
  HfShape h;
  h.b = s.batch_size;
  h.p = s.prompt_len;
  h.n = s.max_new_tokens;
  h.last = checked_add(s.prompt_len, s.max_new_tokens) - 1;
  h.w = width(dtype);
  h.hidden = a.hidden_size;
  h.heads = a.num_heads;
  h.kv_heads = a.num_kv_heads;
  h.head_dim = a.head_dim;
  h.inter = a.intermediate_size;
  if (a.moe_layers > 0) {
    h.experts = a.num_experts;
    h.top_k = a.experts_per_token;
    h.expert_inter = a.moe_intermediate_size > 0 ? a.moe_intermediate_size : a.intermediate_size;
    h.dense_layers = a.moe_layers < a.num_layers;
  }
  h.vocab = a.vocab_size;
  h.full = m.attention.full;
  h.sliding = m.attention.sliding;
  h.window = m.attention.window;
  h.attn = s.attn_implementation;
  h.static_cache = s.cache_implementation == "static";
  h.offloaded = s.cache_implementation == "offloaded";
  h.dense_weight = dense;
  return h;
}

// The two moments the peak can fall at: the prompt's forward at its last layer (every layer's
// cache filled) and the last decode step (the cache at its largest, a cat's old tensor beside).
void fill_peak(ServeEstimate& e, const HfShape& h, const HfCache& c) {
  const HfMoment pre = forward_moment(h, h.p, 0, 0);
  const u64 prefill = checked_add(c.prefill, pre.bytes);
  HfMoment dec;
  u64 decode = 0;
  if (h.n >= 2) {
    dec = forward_moment(h, 1, h.last - 1, c.growth);
    decode = checked_add(c.final, dec.bytes);
  }
  const bool at_prefill = prefill >= decode;
  const HfMoment& at = at_prefill ? pre : dec;
  e.activation_peak_bytes = at.bytes;
  e.activation_basis = fmt::format("{} of {} x {} token(s), beside the cache", at.what,
                                   format_count(h.b), format_count(at_prefill ? h.p : 1));
  e.peak_bytes = checked_add(*e.weights_bytes, std::max(prefill, decode));
  e.peak_cache_bytes = at_prefill ? c.prefill : c.final;
  e.peak_basis = fmt::format("{}: weights + the cache on the device then{} + the forward's peak",
                             at_prefill ? "the prompt's forward" : "the last decode step",
                             c.growth > 0 && !at_prefill ? " (a cat's old tensor included)" : "");
  e.fits = *e.peak_bytes <= *e.budget_bytes;
}

}  // namespace

std::span<const std::string_view> hf_dtype_names() { return kHfDtypeNames; }
std::span<const std::string_view> hf_quantization_names() { return kHfQuantizationNames; }
std::span<const std::string_view> hf_attn_implementations() { return kHfAttnImplementations; }
std::span<const std::string_view> hf_cache_implementations() { return kHfCacheImplementations; }

ServeEstimate estimate_hf(const ServeModel& m, const HfSettings& s) {
  const Dtype dtype = s.dtype.value_or(m.config_fp32 ? Dtype::fp32 : m.dtype);
  check_hf_settings(m, s, dtype);
  ServeEstimate e;
  e.engine = ServeEngine::hf;
  e.model = m.spec.name;
  e.context = checked_add(s.prompt_len, s.max_new_tokens);
  const HfWeights w = hf_weights(m, dtype, s.quantization);
  e.weights_bytes = w.bytes;
  e.weights_basis = w.basis;
  const u64 dense = s.quantization == "bnb-4bit" ? checked_mul(w.largest, width(dtype)) : 0;
  const HfShape h = hf_shape(m, s, dtype, dense);
  const HfCache c = h.static_cache ? static_cache(h)
                    : h.offloaded  ? offloaded_cache(h)
                                   : dynamic_cache(h);
  e.kv_bytes_per_token = mul3(2, half_token(h), h.full + h.sliding);
  e.kv_bytes = c.final;
  e.kv_tokens = checked_mul(h.b, c.tokens);
  e.kv_basis = fmt::format("{} cache, {} B per token and layer; {} full, {} sliding layer(s)",
                           s.cache_implementation, 2 * half_token(h), h.full, h.sliding);
  if (h.offloaded) e.host_kv_bytes = c.host;
  e.budget_bytes = s.total_memory;
  fill_peak(e, h, c);
  if (m.max_positions > 0 && e.context > m.max_positions) {
    e.notes.push_back(fmt::format(
        "prompt + new tokens ({}) pass max_position_embeddings ({}); transformers only warns",
        e.context, m.max_positions));
  }
  if (h.offloaded) {
    e.notes.push_back(fmt::format("the offloaded cache keeps {} in host memory",
                                  format_bytes(c.host, Unit::GiB)));
  }
  return e;
}

}  // namespace memest
