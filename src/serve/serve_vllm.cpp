// vLLM's allocation on one tensor-parallel rank, read from vLLM v0.19.0 (the V1 engine; the
// version of the logs in tests/data/inference/) and the source files named at each function:
// the weights as the model loader stores them, the profile run's torch peak, the budget
// gpu_memory_utilization x total - weights - peak - non-torch memory (v1/worker/gpu_worker.py,
// determine_available_memory), and the KV-cache groups that budget is cut into
// (v1/core/kv_cache_utils.py, _get_kv_cache_groups_uniform_page_size and get_num_blocks).
#include "model/walked_layers.hpp"
#include "serve/serve_bnb.hpp"
#include "serve/serve_weights.hpp"
#include "serve/vllm_graphs.hpp"

#include <memest/allocator_replay.hpp>
#include <memest/error.hpp>
#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace memest {
namespace {

constexpr u64 kGiB = 1ULL << 30;

u64 pad_to(u64 n, u64 m) { return ceil_div(n, m) * m; }

// VocabParallelEmbedding and ParallelLMHead pad the vocabulary to a multiple of 64
// (model_executor/layers/vocab_parallel_embedding.py, DEFAULT_VOCAB_PADDING_SIZE) and give each
// rank an equal slice.
u64 vocab_rows_per_rank(u64 vocab, u64 tp) { return pad_to(vocab, 64) / tp; }

bool low_rank_down(const TensorGroup& g) {  // MLA's q_a_proj, kv_a_proj_with_mqa: replicated
  return g.name.find("_a_proj") != std::string::npos;
}

}  // namespace

// Elements of one tensor of `g` on one rank: column-parallel linears (QKV, gate/up) split their
// output rows and biases, row-parallel ones (o, down) their input columns; k/v with fewer kv
// heads than ranks keep one head per rank (QKVParallelLinear); everything else is replicated.
u64 tensor_elements_per_rank(const TensorGroup& g, const Architecture& a, u64 tp) {
  if ((g.role == Role::embedding || g.kind == "lm_head") && g.rows == a.vocab_size) {
    return checked_mul(vocab_rows_per_rank(a.vocab_size, tp), g.cols);
  }
  if (tp == 1 || low_rank_down(g)) return g.tensor_elements();
  const std::string& k = g.kind;
  const bool bias = g.rows == 1;
  if (k == "k" || k == "v" || k == "q" || k == "qkv" || k == "kv" || k == "gate" || k == "up" ||
      k == "gate_up") {
    const bool one_head = (k == "k" || k == "v") && a.num_kv_heads < tp;
    if (one_head) return bias ? a.head_dim : checked_mul(a.head_dim, g.cols);
    return bias ? g.cols / tp : checked_mul(g.rows / tp, g.cols);
  }
  if (k == "o" || k == "down") return bias ? g.cols : checked_mul(g.rows, g.cols / tp);
  return g.tensor_elements();
}

namespace {

// A linear layer the quantisation method stores in 8 bits: every matmul weight except the
// embeddings and the lm_head (vLLM's Fp8LinearMethod and compressed-tensors' W8A8 FP8 quantise
// LinearBase layers only).
bool stored_in_fp8(const TensorGroup& g) {
  return g.matmul && g.rows > 1 && g.role != Role::embedding && g.kind != "lm_head" &&
         g.role != Role::router;
}

using Weights = StoredWeights;

// fp8 (online, Fp8LinearMethod): e4m3 weights and one fp32 scale per tensor;
// compressed-tensors FP8 dynamic: e4m3 weights and one fp32 scale per output channel; a
// checkpoint's fp8 quantization_config (block-wise): one fp32 scale per 128 x 128 block.
u64 fp8_scale_bytes(const std::string& method, u64 rows, u64 cols) {
  if (method == "compressed-tensors") return checked_mul(4, rows);
  if (method == "fp8-block") return checked_mul(4, ceil_div(rows, 128) * ceil_div(cols, 128));
  return 4;
}

// GPTQ and AWQ (int4/int8 groups), as vLLM's linear methods store a layer of K inputs and N
// outputs on a rank after process_weights_after_loading: the packed weights K x N x bits / 8
// (qweight, int32 words); a scale per group and output in the model dtype (scales, s = K /
// group_size rows; the whole input's groups on every rank for a row-parallel layer with
// activation order, marlin_repeat_scales_on_all_ranks and gptq.py's exllama_state); zero points
// packed like the weights (qzeros, s x N x bits / 8) where the kernel keeps them: GPTQ's exllama
// kernel and AWQ's two, not GPTQ-Marlin's symmetric uint4b8 (MarlinLinearKernel empties w_zp);
// with activation order GPTQ keeps g_idx (K int32) and Marlin also g_idx_sort_indices (K int32),
// else both are emptied. Marlin's repacking (gptq_marlin_repack, marlin_permute_scales,
// marlin_zero_points) keeps each tensor's bytes. Read in vllm/model_executor/layers/quantization/
// gptq.py, awq.py, gptq_marlin.py, awq_marlin.py and kernels/mixed_precision/marlin.py.
struct IntQuant {
  std::string method;  // gptq, gptq_marlin, awq, awq_marlin
  u64 bits = 4;
  u64 group = 128;  // 0: one group over the whole input (group_size -1)
  bool desc_act = false;
};

u64 int_quant_bytes(const IntQuant& q, u64 k, u64 n, u64 k_full, bool row_parallel, u64 w) {
  const bool gptq = q.method.starts_with("gptq");
  const bool repeat = gptq && q.desc_act && row_parallel;
  const u64 group_k = repeat ? k_full : k;
  const u64 groups = q.group == 0 ? 1 : ceil_div(group_k, q.group);
  const u64 packed = checked_mul(checked_mul(k, n), q.bits) / 8;
  const u64 scales = checked_mul(checked_mul(groups, n), w);
  const u64 zeros = q.method == "gptq_marlin" ? 0 : checked_mul(checked_mul(groups, n), q.bits) / 8;
  const u64 g_idx = gptq && q.desc_act ? checked_mul(q.method == "gptq" ? 4 : 8, k) : 0;
  return checked_add(checked_add(packed, scales), checked_add(zeros, g_idx));
}

// bitsandbytes, as vLLM loads it (vllm/model_executor/layers/quantization/bitsandbytes.py at
// commit 01f5395f, BitsAndBytesConfig and BitsAndBytesLinearMethod.create_weights;
// model_loader/bitsandbytes_loader.py at commit 0406fb9f): every LinearBase layer not named by
// llm_int8_skip_modules (is_layer_skipped_bnb: a module name equal to a component or a prefix of
// the layer's name), the MoE experts too (BitsAndBytesMoEMethod); the embeddings, lm_head and
// the routers (ReplicatedLinear without a quant_config) stay in the model dtype. An unquantised
// checkpoint is quantised as it loads, each rank's shard on the GPU, by bitsandbytes'
// quantize_4bit(compress_statistics=True, quant_type="nf4") with blocks of 64: n elements keep
// ceil(n / 2) bytes of packed pairs, the absmax of each block quantised to one byte, an fp32
// absmax per 256 of those, an fp32 offset and the 16-value fp32 code. A bitsandbytes checkpoint
// (quantization_config quant_method bitsandbytes) keeps its own state (QuantState.from_dict):
// 4-bit with bnb_4bit_use_double_quant as above plus its 256-value nested code per tensor, else
// an fp32 absmax per 64; load_in_8bit: int8 weights and an fp32 SCB per output row (Int8Params).
// vLLM refuses tensor parallelism for a bitsandbytes checkpoint. The bytes: serve_bnb.hpp.

// is_layer_skipped_bnb over the module's name ("model.layers.*.mlp.down_proj").
bool bnb_skipped(const TensorGroup& g, const std::vector<std::string>& skip) {
  const std::string module = g.name.substr(0, g.name.rfind('.'));
  std::vector<std::string> prefixes;
  for (std::size_t at = module.find('.');; at = module.find('.', at + 1)) {
    prefixes.push_back(module.substr(0, at));
    if (at == std::string::npos) break;
  }
  for (const std::string& m : skip) {
    for (const std::string& p : prefixes) {
      const std::string last = p.substr(p.rfind('.') == std::string::npos ? 0 : p.rfind('.') + 1);
      if (m == p || m == last) return true;
    }
  }
  return false;
}

std::optional<BnbQuant> bnb_quant(const ServeModel& m, const VllmSettings& s) {
  const auto& c = m.spec.checkpoint_quant;
  const bool checkpoint = c && c->method == "bitsandbytes";
  if (s.quantization != "bitsandbytes" && !(s.quantization.empty() && checkpoint)) {
    return std::nullopt;
  }
  if (c && !checkpoint) {
    throw Error(fmt::format(
        "--quantization: bitsandbytes loads an unquantised or a bitsandbytes checkpoint; the "
        "model's quantization_config is {}",
        c->method));
  }
  if (checkpoint && s.tensor_parallel_size > 1) {
    throw Error(
        "--tensor-parallel-size: vLLM refuses tensor parallelism for a bitsandbytes checkpoint "
        "(its quant states cannot be split)");
  }
  BnbQuant b;
  b.pre_quant = checkpoint;
  b.eight = checkpoint && c->bits == 8;
  b.double_quant = !checkpoint || c->double_quant;
  if (checkpoint) b.skip = c->skip_modules;
  return b;
}

// A linear weight's inputs K and outputs N on one rank, from its elements there `n`.
std::pair<u64, u64> linear_k_n(const TensorGroup& g, u64 n, u64 tp) {
  const bool row_parallel = tp > 1 && (g.kind == "o" || g.kind == "down");
  const u64 k = row_parallel ? g.cols / tp : g.cols;
  return {k, n / std::max<u64>(1, k)};
}

Weights weights_per_rank(const ServeModel& m, const std::string& method, Dtype dtype, u64 tp,
                         const IntQuant* iq, const BnbQuant* bnb) {
  const Architecture& a = *m.spec.arch;
  Weights w;
  u64 quant_elements = 0;
  for (const TensorGroup& g : m.spec.inventory.groups) {
    const u64 n = tensor_elements_per_rank(g, a, tp);
    if (!method.empty() && stored_in_fp8(g) && !(bnb && bnb_skipped(g, bnb->skip))) {
      u64 each = 0;
      if (bnb) {
        each = bnb_bytes(*bnb, g.rows == 1 ? 1 : n / std::max<u64>(1, g.cols), n);
      } else if (iq) {
        const auto [k, out] = linear_k_n(g, n, tp);
        each = int_quant_bytes(*iq, k, out, g.cols, k != g.cols, width(dtype));
      } else {
        const u64 rows = g.rows == 1 ? 1 : n / std::max<u64>(1, g.cols);
        const u64 cols = n / std::max<u64>(1, rows);
        each = checked_add(n, fp8_scale_bytes(method, rows, cols));
      }
      w.bytes = checked_add(w.bytes, checked_mul(each, g.count));
      quant_elements = checked_add(quant_elements, checked_mul(n, g.count));
      continue;
    }
    w.bytes = checked_add(w.bytes, checked_mul(checked_mul(n, g.count), width(dtype)));
  }
  if (method.empty()) {
    w.basis = fmt::format("the parameters of rank 0 in {}", dtype_name(dtype));
  } else if (bnb) {
    w.basis = fmt::format("{} linear weights in {} (bitsandbytes), the rest in {}",
                          format_count(quant_elements),
                          bnb->eight          ? "int8 with an fp32 scale per row"
                          : bnb->double_quant ? "nf4 blocks of 64, absmax double-quantised"
                                              : "nf4 blocks of 64 with an fp32 absmax",
                          dtype_name(dtype));
  } else if (iq) {
    w.basis = fmt::format("{} linear weights in {}-bit groups of {} ({}), the rest in {}",
                          format_count(quant_elements), iq->bits,
                          iq->group == 0 ? std::string("a row") : std::to_string(iq->group), method,
                          dtype_name(dtype));
  } else {
    w.basis = fmt::format("{} linear weights in fp8 with scales ({}), the rest in {}",
                          format_count(quant_elements), method, dtype_name(dtype));
  }
  return w;
}

// The profile run (v1/worker/gpu_model_runner.py, profile_run, at 494636b29): one forward of
// max_num_batched_tokens tokens split over min(max_num_seqs, tokens) requests, then
// _dummy_sampler_run on each request's last hidden state (torch.rand_like of it, a copy) with
// top-k and top-p set. The sampler (v1/sample/sampler.py) takes an fp32 copy of the logits
// (sliced to the unpadded vocabulary), masks top-k and top-p in place with Triton
// (v1/sample/ops/topk_topp_sampler.py forward_native, the default without
// VLLM_USE_FLASHINFER_SAMPLER; topk_topp_triton.py apply_top_k_top_p_triton, whose per-program
// buffer of min(next_pow2(programs), SMs) rows of the vocabulary in fp32 it keeps cached, the
// programs being min(SMs, requests)), then softmaxes into fp32 probabilities and draws with an
// fp32 tensor of exponentials (random_sample). Live at that peak: the forward's hidden states,
// the sampled rows and their random copy, the gathered logits in the model dtype (padded
// vocabulary, held by the caller), the three fp32 tensors and the Triton buffer. The forward's
// own peak is the widest layer's inputs and outputs. PyTorch's cuBLAS workspace of the one
// thread that runs matmuls (aten/src/ATen/cuda/CublasHandlePool.cpp, through the caching
// allocator) is made by the first matmul of the profile run and held by either peak.
struct ProfilePeak {
  u64 bytes = 0;
  std::string basis;
};

u64 next_pow2(u64 n) {
  u64 p = 1;
  while (p < n) p *= 2;
  return p;
}

ProfilePeak profile_run_peak(const Architecture& a, const VllmSettings& s, Dtype dtype) {
  const u64 tokens = s.max_num_batched_tokens;
  const u64 requests = std::min(s.max_num_seqs, tokens);
  const u64 w = width(dtype);
  const u64 h = a.hidden_size;
  const u64 hidden = checked_mul(checked_mul(tokens, h), w);
  const u64 vpad = pad_to(a.vocab_size, 64);
  const u64 rows = checked_mul(requests, a.vocab_size);
  const u64 buffer_rows = std::min(next_pow2(std::min(s.compute_units, requests)), s.compute_units);
  const u64 triton = checked_mul(checked_mul(buffer_rows, 4), a.vocab_size);
  const u64 sampler = checked_add(
      checked_add(hidden, checked_mul(checked_mul(2 * requests, h), w)),
      checked_add(checked_add(checked_mul(checked_mul(requests, vpad), w), checked_mul(rows, 12)),
                  triton));
  // The MLP: gate_up [T, 2 I / tp] and SiluAndMul's [T, I / tp] beside the residual and input.
  const u64 mlp_width =
      std::max(a.intermediate_size, a.moe_intermediate_size * a.experts_per_token);
  const u64 forward =
      checked_add(checked_mul(2, hidden),
                  checked_mul(checked_mul(tokens, 3 * mlp_width / s.tensor_parallel_size), w));
  const u64 workspace = cublas_workspace_for(s.sm);
  ProfilePeak p;
  p.bytes = checked_add(std::max(sampler, forward), workspace);
  p.basis =
      sampler >= forward
          ? fmt::format(
                "sampler over {} requests x {} vocab: logits in {} + 3 fp32 copies, Triton's "
                "{}-row buffer",
                format_count(requests), format_count(a.vocab_size), dtype_name(dtype), buffer_rows)
          : fmt::format("forward of {} tokens: the MLP's input and outputs", format_count(tokens));
  p.basis += fmt::format(", cuBLAS workspace {}", format_bytes(workspace, Unit::MiB));
  return p;
}

// profile_run's encoder pass (v1/worker/gpu_model_runner.py at 494636b29): a multimodal model
// runs its encoder on max_mm_items_per_batch dummy images of the largest size first, and both
// the batched dummy images (`batched_dummy_mm_inputs`, a local of profile_run, their pixels in
// the model dtype: multimodal/processing/context.py, _postprocess_output) and their embeddings
// (kept in the encoder cache) stay through the text forward and the sampler, so they add to
// either peak. The items (multimodal/encoder_budget.py, MultiModalBudget._get_max_items): the
// encoder budget (max_num_encoder_input_tokens = max_num_batched_tokens, or one image's tokens
// if more: v1/core/encoder_cache_manager.py, compute_mm_encoder_budget) over one image's
// tokens, at most max_num_seqs x the images a prompt holds (max_model_len over one image's
// tokens, within the default limit of 999 per prompt), at least 1. Gemma 3
// (models/gemma3_mm.py): an image of image_size^2 pixels in num_channels, and
// mm_tokens_per_image embeddings of the text width (Gemma3MultiModalProjector). The encoder's
// own peak, before the text forward, is not modelled (below the sampler's for Gemma 3).
struct EncoderPass {
  u64 items = 0;
  u64 bytes = 0;
};

EncoderPass encoder_pass(const VisionTower& v, const VllmSettings& s, u64 context, Dtype dtype) {
  const u64 tokens = v.tokens_per_image;
  if (v.layers == 0 || v.projector_out == 0 || tokens == 0) return {};
  const u64 budget = std::max(s.max_num_batched_tokens, tokens);
  const u64 per_prompt = std::max<u64>(1, std::min<u64>(999, context / tokens));
  const u64 items =
      std::max<u64>(1, std::min(budget / tokens, checked_mul(s.max_num_seqs, per_prompt)));
  const u64 pixels = checked_mul(checked_mul(v.channels, v.image), v.image);
  const u64 per_image = checked_add(pixels, checked_mul(tokens, v.projector_out));
  return {items, checked_mul(checked_mul(items, per_image), width(dtype))};
}

// The KV-cache groups of one page size: layers of one kind in groups of the smallest kind's
// count (the largest when the counts are within 25% of each other), the last group of a kind
// padded with empty layers; every group is given the same number of blocks.
struct Groups {
  u64 size = 0;     // layers per group
  u64 full = 0;     // groups of full-attention layers
  u64 sliding = 0;  // groups of sliding-window layers
};

Groups kv_cache_groups(const AttentionLayers& l) {
  if (l.full == 0 || l.sliding == 0) {
    const u64 n = std::max(l.full, l.sliding);
    return {.size = n, .full = l.full > 0 ? 1ULL : 0ULL, .sliding = l.sliding > 0 ? 1ULL : 0ULL};
  }
  const u64 lo = std::min(l.full, l.sliding);
  const u64 hi = std::max(l.full, l.sliding);
  const u64 size = 4 * hi < 5 * lo ? hi : lo;  // max < min * 1.25
  return {.size = size, .full = ceil_div(l.full, size), .sliding = ceil_div(l.sliding, size)};
}

u64 default_kv_width(const VllmSettings& s, Dtype dtype) {
  if (s.kv_cache_dtype == "auto") return width(dtype);
  return 1;  // fp8, fp8_e4m3, fp8_e5m2
}

// vLLM's choice of kernel for a GPTQ or AWQ checkpoint: Marlin where it takes the format
// (GPTQMarlinConfig.override_quantization_method: symmetric 4 or 8 bits; AWQMarlinConfig: 4 or 8
// bits; group sizes -1, 32, 64, 128, marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES) unless
// --quantization gptq or awq asks for the other kernel.
bool marlin_takes(const CheckpointQuant& c) {
  const bool bits = c.bits == 4 || c.bits == 8;
  const bool group =
      c.group_size == 0 || c.group_size == 32 || c.group_size == 64 || c.group_size == 128;
  return bits && group && (c.method == "awq" || c.sym);
}

std::optional<IntQuant> int_quant(const ServeModel& m, const VllmSettings& s) {
  const auto& c = m.spec.checkpoint_quant;
  const bool int_flag = s.quantization.starts_with("gptq") || s.quantization.starts_with("awq");
  const bool int_checkpoint = c && (c->method == "gptq" || c->method == "awq");
  if (!int_flag && !(s.quantization.empty() && int_checkpoint)) return std::nullopt;
  if (!int_checkpoint || !s.quantization.starts_with(int_flag ? c->method : "")) {
    throw Error(
        fmt::format("--quantization: {} reads a {} checkpoint's packed weights; the model's "
                    "quantization_config is {}",
                    s.quantization, s.quantization.substr(0, s.quantization.find('_')),
                    c ? c->method : "absent"));
  }
  IntQuant q;
  q.bits = c->bits;
  q.group = c->group_size;
  q.desc_act = c->desc_act;
  q.method =
      s.quantization.empty() ? c->method + (marlin_takes(*c) ? "_marlin" : "") : s.quantization;
  return q;
}

std::string quant_method(const ServeModel& m, const VllmSettings& s,
                         const std::optional<IntQuant>& iq) {
  if (iq) return iq->method;
  if (!s.quantization.empty()) return s.quantization;
  if (m.spec.checkpoint_quant && m.spec.checkpoint_quant->method == "fp8") return "fp8-block";
  return "";
}

// The KV cache a budget of `memory` bytes buys: blocks, tokens and requests at once.
void fill_kv_cache(ServeEstimate& e, const ServeModel& m, const VllmSettings& s, u64 memory,
                   u64 batched) {
  const Architecture& a = *m.spec.arch;
  const Dtype dtype = s.dtype.value_or(m.dtype);
  const u64 per_layer =
      kv_bytes_per_layer_token(a, default_kv_width(s, dtype), s.tensor_parallel_size);
  if (per_layer == 0) throw Error("serve: the model caches no keys or values (no attention)");
  const Groups g = kv_cache_groups(m.attention);
  const u64 page = checked_mul(s.block_size, per_layer);
  const u64 blocks = memory / page / g.size;
  const u64 groups = g.full + g.sliding;
  e.kv_bytes_per_token = checked_mul(checked_mul(groups, g.size), per_layer);
  e.kv_blocks = blocks;
  e.kv_bytes = checked_mul(checked_mul(blocks, page), g.size);
  e.kv_tokens = blocks / groups * s.block_size;  // kv_cache_utils: num_blocks // groups * bs
  // Blocks one request of max_model_len needs (max_memory_usage_bytes of each spec): a full
  // layer's whole context; a sliding one's window plus a prefill chunk, and one block more as
  // the window may start inside a block.
  const u64 full_blocks = ceil_div(e.context, s.block_size);
  const u64 slide_tokens = std::min(m.attention.window + batched - 1, e.context);
  const u64 slide_blocks = ceil_div(slide_tokens, s.block_size) + 1;
  const u64 per_request = g.full * full_blocks + g.sliding * slide_blocks;
  e.request_blocks = per_request;
  e.max_concurrency = static_cast<double>(blocks) / static_cast<double>(per_request);
  e.kv_basis = fmt::format(
      "{} B per token and layer; {} group(s) of {} layers ({} full, {} sliding); {} tokens per "
      "block",
      per_layer, groups, g.size, m.attention.full, m.attention.sliding, s.block_size);
}

// KV bytes one request of `context` tokens needs over every layer (check_enough_kv_cache_memory
// in v1/core/kv_cache_utils.py sums each layer's max_memory_usage_bytes): a full layer's whole
// context, a sliding layer's window plus a prefill chunk and one block.
u64 request_bytes(const AttentionLayers& l, u64 context, u64 batched, u64 block, u64 page) {
  const u64 full = checked_mul(l.full, ceil_div(context, block));
  const u64 slide_tokens = std::min(l.window + batched - 1, context);
  const u64 slide = checked_mul(l.sliding, ceil_div(slide_tokens, block) + 1);
  return checked_mul(checked_add(full, slide), page);
}

// vLLM refuses to start when one request of max_model_len does not fit; it then names the
// longest that would (the largest length whose request fits, found by bisection).
void check_one_request(ServeEstimate& e, const ServeModel& m, const VllmSettings& s, u64 memory,
                       u64 batched) {
  const u64 per_layer = kv_bytes_per_layer_token(
      *m.spec.arch, default_kv_width(s, s.dtype.value_or(m.dtype)), s.tensor_parallel_size);
  const u64 page = checked_mul(s.block_size, per_layer);
  e.kv_memory_bytes = memory;
  e.request_kv_bytes = request_bytes(m.attention, e.context, batched, s.block_size, page);
  if (*e.request_kv_bytes <= memory) return;
  e.fits = false;
  u64 lo = 0;
  u64 hi = e.context;
  while (lo < hi) {
    const u64 mid = lo + (hi - lo + 1) / 2;
    if (request_bytes(m.attention, mid, batched, s.block_size, page) <= memory) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  e.largest_context = lo;
}

// CUDA graphs: none under --enforce-eager. Else vLLM captures them after the KV cache is sized
// (gpu_worker.py, compile_or_warm_up_model -> capture_model) and v0.19 leaves them out of the
// budget: profile_cudagraph_memory's estimate is subtracted only with
// VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, off by default (envs.py; on by default on main
// from 2026-04-21, vllm#38284). Their bytes are not modelled: besides the graph pool (the
// largest size's intermediates, a few tens of MiB) they hold the driver's memory for each
// captured graph, which no code states (docs/serving.md).
void set_cuda_graphs(ServeEstimate& e, const VllmSettings& s, u64 batched) {
  if (s.enforce_eager) {
    e.cuda_graphs_bytes = 0;
    e.cuda_graphs_basis = "--enforce-eager";
    return;
  }
  const std::vector<u64> sizes = vllm_cudagraph_capture_sizes(s.max_num_seqs, batched);
  if (sizes.empty()) {
    e.cuda_graphs_basis = "no batch size to capture";
    return;
  }
  e.cuda_graphs_basis =
      fmt::format("{} batch sizes, 1 to {}, captured after the KV cache; not in the budget",
                  sizes.size(), sizes.back());
}

// data table
constexpr std::array<std::string_view, 4> kVllmKvCacheDtypes = {"auto", "fp8", "fp8_e4m3",
                                                                "fp8_e5m2"};
// data table
constexpr std::array<std::string_view, 7> kVllmQuantizationMethods = {
    "fp8", "compressed-tensors", "gptq", "gptq_marlin", "awq", "awq_marlin", "bitsandbytes"};
// data table
constexpr std::array<std::string_view, 6> kVllmDtypeNames = {"auto",    "bfloat16", "bf16",
                                                             "float16", "fp16",     "half"};

}  // namespace

// KV bytes one token takes in one layer on one rank: MLA caches the compressed latent and the
// shared rotary key (kv_lora_rank + qk_rope_head_dim, MLAAttentionSpec) whole on every rank;
// other attention caches k and v for the rank's kv heads (FullAttentionSpec).
u64 kv_bytes_per_layer_token(const Architecture& a, u64 kv_width, u64 tp) {
  if (a.kv_lora_rank > 0) return checked_mul(a.kv_lora_rank + a.qk_rope_head_dim, kv_width);
  const u64 heads = std::max<u64>(1, a.num_kv_heads / tp);
  return checked_mul(checked_mul(2 * heads, a.head_dim), kv_width);
}

StoredWeights vllm_weights_per_rank(const ServeModel& m, const VllmSettings& s) {
  const Dtype dtype = s.dtype.value_or(m.dtype);
  const std::optional<IntQuant> iq = int_quant(m, s);
  const std::optional<BnbQuant> bnb = bnb_quant(m, s);
  const std::string method = bnb ? "bitsandbytes" : quant_method(m, s, iq);
  return weights_per_rank(m, method, dtype, s.tensor_parallel_size, iq ? &*iq : nullptr,
                          bnb ? &*bnb : nullptr);
}

namespace {

// What "Model loading took" counts (vllm_load.cpp): unquantised parameters as the caching
// allocator holds them with the rotary tables; a quantised layout's tensors are replaced after
// loading (process_weights_after_loading), which is not followed: its stored bytes plus the
// tables.
Weights vllm_loaded_weights(const ServeModel& m, const VllmSettings& s) {
  Weights w = vllm_weights_per_rank(m, s);
  const Dtype dtype = s.dtype.value_or(m.dtype);
  const u64 rope = rope_table_bytes(m, dtype);
  const bool plain = s.quantization.empty() && !m.spec.checkpoint_quant;
  w.bytes = plain ? vllm_loaded_bytes(m, dtype, s.tensor_parallel_size) : w.bytes + rope;
  if (plain) w.basis += " in the caching allocator's blocks";
  if (!m.rope.empty()) {
    w.basis += fmt::format(", {} rotary table{} ({})", m.rope.size(), m.rope.size() > 1 ? "s" : "",
                           format_bytes(rope, Unit::MiB));
  }
  return w;
}

}  // namespace

std::span<const std::string_view> vllm_kv_cache_dtypes() { return kVllmKvCacheDtypes; }
std::span<const std::string_view> vllm_quantization_methods() { return kVllmQuantizationMethods; }
std::span<const std::string_view> vllm_dtype_names() { return kVllmDtypeNames; }

u64 vllm_budget(const VllmSettings& s) {
  return static_cast<u64>(
      std::floor(static_cast<double>(s.total_memory) * s.gpu_memory_utilization));
}

namespace {

// The profile run's torch peak into `e`: the text forward or the sampler, and a multimodal
// model's encoder pass beside it.
u64 set_profile_peak(ServeEstimate& e, const Architecture& a, const VllmSettings& s, Dtype dtype) {
  const ProfilePeak p = profile_run_peak(a, s, dtype);
  const EncoderPass cache = encoder_pass(a.vision, s, e.context, dtype);
  const u64 peak = checked_add(p.bytes, cache.bytes);
  e.activation_peak_bytes = peak;
  e.activation_basis = p.basis;
  if (cache.items > 0) {
    e.activation_basis +=
        fmt::format(", beside the encoder pass's {} dummy images and their {} embeddings each",
                    cache.items, a.vision.tokens_per_image);
  }
  return peak;
}

}  // namespace

ServeEstimate estimate_vllm(const ServeModel& m, const VllmSettings& s) {
  const Architecture& a = *m.spec.arch;
  const u64 tp = s.tensor_parallel_size;
  if (a.num_heads % tp != 0) {
    throw Error(
        fmt::format("--tensor-parallel-size: {} does not divide the model's {} attention heads", tp,
                    a.num_heads));
  }
  ServeEstimate e;
  e.engine = ServeEngine::vllm;
  e.model = m.spec.name;
  e.devices = tp;
  e.context = s.max_model_len > 0 ? s.max_model_len : m.max_positions;
  if (e.context == 0) throw Error("--max-model-len: the config has no max_position_embeddings");
  const Dtype dtype = s.dtype.value_or(m.dtype);
  check_walked_layers(a.num_layers, "--engine vllm");
  const Weights w = vllm_loaded_weights(m, s);
  e.weights_bytes = w.bytes;
  e.weights_basis = w.basis;
  const u64 batched = s.max_num_batched_tokens;
  const u64 peak = set_profile_peak(e, a, s, dtype);
  // Not modelled by mechanism: what the device holds outside torch after the profile run less
  // what it held after the distributed set-up (gpu_worker.py, init_device takes the snapshot
  // after NCCL, custom all-reduce and symmetric-memory buffers are made, so those are not in
  // it). In it: the kernels loaded as they first run; under TP, FlashInfer's all-reduce fusion
  // workspace (made when the model compiles; sized by code, but rounded by the driver's
  // multicast granularity) and the NCCL communicator and buffers made by collectives (no size
  // in vLLM's code); docs/serving.md. The default is what vLLM 0.19 printed on H100s in the
  // llm-d-planner sweep (0.24-0.26 GiB on one GPU, 2.07-2.21 GiB under TP); --non-torch-memory
  // states it.
  e.non_torch_bytes = s.non_torch_memory.value_or(tp == 1 ? kGiB / 4 : 2 * kGiB);
  e.non_torch_basis = s.non_torch_memory ? "as given" : "measured default (not modelled)";
  set_cuda_graphs(e, s, batched);
  e.budget_bytes = vllm_budget(s);
  const u64 used = w.bytes + peak + *e.non_torch_bytes;
  if (!s.kv_cache_memory && used >= *e.budget_bytes) {
    throw Error(fmt::format(
        "serve: no memory left for the KV cache: weights {} + profile peak {} + non-torch {} "
        "exceed gpu_memory_utilization x total = {} (try more --tensor-parallel-size, a higher "
        "--gpu-memory-utilization or --quantization fp8)",
        format_bytes(w.bytes, Unit::GiB), format_bytes(peak, Unit::GiB),
        format_bytes(*e.non_torch_bytes, Unit::GiB), format_bytes(*e.budget_bytes, Unit::GiB)));
  }
  const u64 memory = s.kv_cache_memory.value_or(*e.budget_bytes - used);
  fill_kv_cache(e, m, s, memory, batched);
  if (e.kv_blocks == 0) throw Error("serve: the KV-cache memory holds no block");
  check_one_request(e, m, s, memory, batched);
  if (m.attention.sliding > 0 && batched + m.attention.window > e.context) {
    e.notes.push_back(
        "the sliding window saves nothing here: window + max_num_batched_tokens covers "
        "max_model_len");
  }
  return e;
}

}  // namespace memest
