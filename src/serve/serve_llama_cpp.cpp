// llama.cpp's KV cache, as llama_kv_cache_init (src/llama-kv-cache.cpp of the 2024-2025 builds,
// e.g. the copy beside llama_kv_cache_get_padding) sizes it: one K and one V tensor per layer of
// n_embd_k_gqa x kv_size and n_embd_v_gqa x kv_size elements, each ggml_row_size(type, n): whole
// blocks of the cache type (ggml's type traits, ggml/src/ggml.c: blck_size and type_size).
// kv_size is the context padded to 256 cells with flash attention and to 32 without
// (llama_kv_cache_get_padding). Every layer keeps the whole context (sliding windows ignored,
// as the builds before the iSWA cache do); --parallel slots share it (the unified cache). Each
// layer's K and V are on its layer's device (src/serve/llama_cpp_split.cpp), the CPU layers' in
// host memory; each device with layers computes them, the output's device the logits.
#include "base/names.hpp"
#include "serve/ggml_alloc.hpp"
#include "serve/ggml_graph.hpp"
#include "serve/ggml_types.hpp"
#include "serve/ik_gqa_graph.hpp"
#include "serve/ik_mla_graph.hpp"
#include "serve/llama_cpp_split.hpp"
#include "serve/llama_cpp_tensors.hpp"
#include "serve/serve_gguf.hpp"

#include <memest/error.hpp>
#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <vector>

namespace memest {
namespace {

// data table
constexpr std::array<GgmlType, 9> kCacheTypes = {{
    ggml_traits("f32"), ggml_traits("f16"), ggml_traits("bf16"),
    ggml_traits("q8_0"),  // 32 int8 + an fp16 scale
    ggml_traits("q4_0"),  // 32 4-bit + an fp16 scale
    ggml_traits("q4_1"),  // + an fp16 minimum
    ggml_traits("q5_0"),  // + 32 high bits
    ggml_traits("q5_1"),
    ggml_traits("iq4_nl"),  // non-linear 4-bit, an fp16 scale
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
// place (the softmax of KQ), so the peak is the widest of the moments of the worst-case graph
// llama.cpp reserves (n_kv = the whole cache, n_tokens = the micro-batch, every token an output):
// the attention without flash attention (KQ [n_kv x n_tokens x n_head], the mask [n_kv x
// n_tokens], the Q (or fused QKV) projection and the attention output, beside the layer's input
// and residual [n_embd x n_tokens]), the routed experts' down projection of a MoE layer, and the
// output (logits [n_vocab x n_tokens] beside the same two hidden states) when the output layer
// is on the GPU. Not counted: MLA's absorbed attention.
struct ComputeBuffer {
  u64 attention = 0;  // the attention moment of a device with layers
  u64 moe = 0;        // the experts' moment of a device with (MoE) layers
  u64 output = 0;     // the output moment of the device with the output layer
  u64 mask = 0;       // the KQ mask counted in the attention moment
  std::string attention_basis;
  std::string moe_basis;
  std::string output_basis;
};

// llm_build_moe_ffn (src/llama.cpp of ikawrakow/ik_llama.cpp at 4084ca73; build_moe_ffn in
// mainline's graph): the down projection's ggml_mul_mat_id writes [n_embd x n_expert_used x
// n_tokens] f32 from the gated product [n_ff_exp x n_expert_used x n_tokens] f32
// (ggml_moe_up_gate under -fmoe, else the product of the up and gate matmuls, freed by then),
// beside the residual ffn_inp [n_embd x n_tokens]; the normed input is freed after the up and
// gate matmuls. 0 for a dense model.
void add_moe_moment(const Architecture& a, u64 tokens, ComputeBuffer& c) {
  if (a.num_experts == 0 || a.experts_per_token == 0) return;
  const u64 width = a.moe_intermediate_size > 0 ? a.moe_intermediate_size : a.intermediate_size;
  const u64 routed = checked_mul(checked_mul(a.experts_per_token, tokens), 4);
  c.moe = checked_add(checked_mul(a.hidden_size, checked_mul(tokens, 4)),
                      checked_mul(checked_add(width, a.hidden_size), routed));
  c.moe_basis = fmt::format("{} experts' {} + {} wide outputs of {} tokens in f32",
                            a.experts_per_token, width, a.hidden_size, tokens);
}

ComputeBuffer compute_buffer(const Architecture& a, u64 n_kv, u64 tokens, bool flash_attn) {
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
  ComputeBuffer c;
  c.attention = attention;
  c.mask = checked_mul(checked_mul(n_kv, tokens), flash_attn ? 2 : f32);
  c.output = checked_add(hidden, checked_mul(checked_mul(a.vocab_size, tokens), f32));
  c.output_basis = fmt::format("logits of {} tokens x {} vocab in f32", tokens, a.vocab_size);
  c.attention_basis = flash_attn ? "the attention's inputs and output"
                                 : fmt::format("KQ of {} cells x {} tokens x {} heads in f32", n_kv,
                                               tokens, a.num_heads);
  add_moe_moment(a, tokens, c);
  return c;
}

// The KV cache of one layer (K and V of every cell), the widths as the cache types store them.
struct LayerKv {
  u64 bytes = 0;
  std::string basis;  // "(K 512 x f16 + V 512 x f16)"
};

void check_cache_types(const LlamaCppSettings& s) {
  cache_type(s.cache_type_k, "--cache-type-k");
  const GgmlType& tv = cache_type(s.cache_type_v, "--cache-type-v");
  if (tv.block > 1 && !s.flash_attn) {
    throw Error(
        fmt::format("--cache-type-v: {} needs --flash-attn (llama.cpp quantises V only "
                    "with flash attention)",
                    tv.name));
  }
}

LayerKv layer_kv(const Architecture& a, const LlamaCppSettings& s, u64 cells) {
  const GgmlType& tk = cache_type(s.cache_type_k, "--cache-type-k");
  const GgmlType& tv = cache_type(s.cache_type_v, "--cache-type-v");
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
  return {checked_add(row_bytes(tk, checked_mul(k_width, cells)),
                      row_bytes(tv, checked_mul(v_width, cells))),
          fmt::format("(K {} x {} + V {} x {})", k_width, tk.name, v_width, tv.name)};
}

// Pipeline parallelism (llama_new_context_with_model, src/llama.cpp of ikawrakow/ik_llama.cpp at
// 4084ca73, as mainline's context): with several devices, every layer and the output offloaded
// (n_gpu_layers > n_layer) and --split-mode layer, ggml_backend_sched_new keeps n_copies =
// GGML_SCHED_MAX_COPIES (--sched-copies) copies of each split's inputs from other backends, each
// set as input and output so that ggml-alloc never frees or reuses them
// (ggml_backend_sched_split_graph, ggml/src/ggml-backend.c). The graph's inputs are on the CPU
// (the last backend); a device's split takes the hidden state [n_embd x n_tokens] f32 (inp_embd
// from the CPU, else the previous device's layer output), inp_pos (n_tokens i32), the KQ mask
// [n_kv x GGML_PAD(n_tokens, 32)] (f32 from the CPU, or with flash attention the f16 ggml_cast
// of it, made by the first device's first layer and kept there until the next split has copied
// it) and, on the last layer's device, inp_out_ids (n_tokens i32, every token an output).
// --override-tensor turns it off, as mainline's llama_context and ik_llama.cpp from commit
// a3bd0158 (src/llama.cpp: !model->has_tensor_overrides()) do; the builds before kept it on.
// Returns each device's bytes held beside its moments; empty without pipeline parallelism.
std::vector<u64> pipeline_copies(const Architecture& a, const LlamaCppSettings& s,
                                 const LlamaCppPlacement& p, u64 n_kv, u64 tokens) {
  if (p.names.size() < 2 || s.split_mode != "layer" || s.n_gpu_layers <= a.num_layers ||
      s.sched_copies < 2 || !s.overrides.empty()) {
    return {};
  }
  const u64 mask_f32 = kq_mask_f32(n_kv, tokens);
  const u64 hidden = checked_mul(checked_mul(a.hidden_size, tokens), 4);
  const u64 ids = checked_mul(tokens, 4);  // inp_pos, inp_out_ids
  const auto first = static_cast<std::size_t>(p.layer_device.front());
  const auto last = static_cast<std::size_t>(p.layer_device.back());
  std::vector<u64> bytes(p.names.size(), 0);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const bool layers = std::find(p.layer_device.begin(), p.layer_device.end(),
                                  static_cast<int>(i)) != p.layer_device.end();
    if (!layers && p.output_device != static_cast<int>(i)) continue;
    u64 inputs = hidden;
    if (layers) inputs += ids + (s.flash_attn && i != first ? mask_f32 / 2 : mask_f32);
    if (i == last) inputs += ids;
    bytes[i] = checked_mul(inputs, s.sched_copies);
    if (i == first && s.flash_attn) bytes[i] = checked_add(bytes[i], mask_f32 / 2);
  }
  return bytes;
}

// ggml_backend_cuda_offload_op: whether a GPU takes over the experts' matmuls of a MoE layer
// whose experts stay in host memory (copying their weights over for the op). ik_llama.cpp
// (ggml/src/ggml-cuda.cu at 1843ed22) does from 32 tokens whose tokens x active experts reach
// 32 x the experts; mainline llama.cpp (get_op_batch_size: MUL_MAT_ID's ne[2]) from 32 tokens.
// The launch is taken for ik_llama.cpp's when it uses one of ik_llama.cpp's own flags (--mla,
// --fused-moe, --attention-max-batch).
bool ik_llama(const LlamaCppSettings& s) { return s.mla || s.fused_moe || s.attn_max_batch > 0; }

// The fewest tokens from which a GPU takes the experts' matmuls over.
u64 gpu_expert_batch(const Architecture& a, const LlamaCppSettings& s) {
  constexpr u64 kMin = kCudaMinBatchOffload;
  if (!ik_llama(s)) return kMin;
  return std::max(kMin, ceil_div(checked_mul(kMin, a.num_experts), a.experts_per_token));
}

// Per layer: a MoE layer (of the last moe_layers layers) on a GPU whose three expert tensors
// --override-tensor keeps in host memory.
std::vector<bool> layers_with_host_experts(const Architecture& a, const LlamaCppPlacement& p,
                                           const LlamaCppSettings& s) {
  std::vector<bool> out(static_cast<std::size_t>(a.num_layers), false);
  if (a.num_experts == 0 || a.experts_per_token == 0 || a.moe_layers == 0 || s.overrides.empty())
    return out;
  constexpr std::array<const char*, 3> kExperts = {"ffn_up_exps", "ffn_gate_exps", "ffn_down_exps"};
  std::vector<LlamaTensor> experts;  // kExperts.size() a layer, from the first MoE layer
  const u64 first = a.num_layers - std::min(a.moe_layers, a.num_layers);
  for (u64 il = first; il < a.num_layers; ++il) {
    for (const char* w : kExperts)
      experts.push_back({.name = fmt::format("blk.{}.{}.weight", il, w), .layer = il});
  }
  const std::vector<bool> host = llama_cpp_on_host(experts, p, s);
  for (u64 il = first; il < a.num_layers; ++il) {
    const auto at = host.begin() + static_cast<std::ptrdiff_t>((il - first) * kExperts.size());
    const auto i = static_cast<std::size_t>(il);
    const bool on_gpu = il < p.layer_device.size() && p.layer_device[i] != kLlamaHost;
    out[i] = on_gpu && std::all_of(at, at + kExperts.size(), [](bool h) { return h; });
  }
  return out;
}

// Who computes the experts of `layers` layers kept in host memory at `tokens` tokens, a GPU
// taking them over from `gpu_from`, said in a note; `copies_counted`: the graph holds the GPU's
// copies of their weights.
void note_host_experts(ServeEstimate& e, u64 layers, u64 tokens, u64 gpu_from,
                       bool copies_counted) {
  if (layers == 0) return;
  if (tokens < gpu_from) {
    e.notes.push_back(fmt::format(
        "the host computes the experts of {} MoE layers at {} tokens (a GPU takes them over from "
        "{}): their intermediates are in its compute buffer",
        layers, tokens, gpu_from));
  } else {
    e.notes.push_back(fmt::format(
        "a GPU computes the experts of {} MoE layers kept in host memory at {} tokens, copying "
        "their weights in ({})",
        layers, tokens,
        copies_counted ? "one op's at a time, in its compute buffer"
                       : "not counted in its compute buffer"));
  }
}

// The graph's inputs (ggml_backend_sched_backend_id_from_cur puts them on the last backend, the
// CPU), allocated first in the order the graph reaches them: inp_tokens, inp_pos, the f32 KQ
// mask [n_kv x GGML_PAD(n_tokens, 32)] and inp_out_ids, each n_copies times under pipeline
// parallelism; then inp_embd [n_embd x n_tokens] f32 (token_embd stays on the CPU and
// GGML_OP_GET_ROWS is never offloaded). With one copy, get_rows frees the tokens and the first
// GPU split's input_dep nodes free the embeddings, positions and mask once copied; several
// copies are graph outputs, never freed.
void host_inputs(GgmlDynAllocator& cpu, const Architecture& a, u64 copies, u64 n_kv, u64 tokens) {
  const u64 ids = checked_mul(tokens, 4);
  const u64 mask = kq_mask_f32(n_kv, tokens);
  const u64 embd = checked_mul(checked_mul(a.hidden_size, tokens), 4);
  u64 tok = 0, pos = 0, kq = 0;
  for (u64 c = 0; c < copies; ++c) {
    tok = cpu.alloc(ids);
    pos = cpu.alloc(ids);
    kq = cpu.alloc(mask);
    cpu.alloc(ids);  // inp_out_ids, read by the last layer
  }
  const u64 inp_embd = cpu.alloc(embd);
  if (copies > 1) return;
  cpu.free(tok, ids);
  cpu.free(inp_embd, embd);
  cpu.free(pos, ids);
  cpu.free(kq, mask);
}

// One MoE layer whose experts the host computes (llm_build_moe_ffn, src/llama.cpp of
// ik_llama.cpp at 1843ed22; build_moe_ffn of mainline's graph): the split's copies of the normed
// input [n_embd x n_tokens] f32 and the selected experts [n_used x n_tokens] i32; the experts'
// gated product [n_ff x n_used x n_tokens] f32 (ggml_moe_up_gate under --fused-moe; else the up
// and gate products, then ik_llama.cpp's ggml_fused_mul_unary into a new tensor, or mainline's
// silu and mul in place); the down projection [n_embd x n_used x n_tokens] f32, freed once the
// next GPU split has copied it. Each tensor is freed after its last reader, as ggml_gallocr
// does, so every such layer leaves the buffer as it found it.
void host_expert_layer(GgmlDynAllocator& cpu, const Architecture& a, const LlamaCppSettings& s,
                       u64 tokens) {
  const u64 ff = a.moe_intermediate_size > 0 ? a.moe_intermediate_size : a.intermediate_size;
  const u64 routed = checked_mul(a.experts_per_token, tokens);
  const u64 in = checked_mul(checked_mul(a.hidden_size, tokens), 4);
  const u64 sel = checked_mul(routed, 4);
  const u64 gated = checked_mul(checked_mul(ff, routed), 4);
  const u64 down = checked_mul(checked_mul(a.hidden_size, routed), 4);
  const u64 in_at = cpu.alloc(in), sel_at = cpu.alloc(sel);
  u64 par = 0;
  if (s.fused_moe) {
    par = cpu.alloc(gated);
    cpu.free(in_at, in);
  } else {
    const u64 up = cpu.alloc(gated), gate = cpu.alloc(gated);
    cpu.free(in_at, in);
    par = ik_llama(s) ? cpu.alloc(gated) : gate;  // ik_llama.cpp's fused_mul_unary: not in place
    if (par != gate) cpu.free(gate, gated);
    cpu.free(up, gated);
  }
  const u64 out = cpu.alloc(down);
  cpu.free(par, gated);
  cpu.free(sel_at, sel);
  cpu.free(out, down);
}

// The CPU backend's compute buffer: the high-water mark of ggml's allocator (ggml_dyn_tallocr,
// src/serve/ggml_alloc.cpp) over the host's tensors in graph order: the inputs, then the
// experts of a MoE layer the host computes (each such layer alike). The CUDA host buffer aligns
// to 32 bytes (TENSOR_ALIGNMENT). Not modelled (empty): CPU layers, whose intermediates the host
// computes. Not counted: the second (sliding-window) mask of the graphs that build one (Gemma-2
// and -3).
std::optional<u64> host_compute(const ServeModel& m, const LlamaCppPlacement& p,
                                const LlamaCppSettings& s, u64 copies, u64 n_kv, u64 tokens,
                                bool host_experts) {
  const bool cpu_layers = std::any_of(p.layer_device.begin(), p.layer_device.end(),
                                      [](int d) { return d == kLlamaHost; });
  if (cpu_layers) return std::nullopt;
  const Architecture& a = *m.spec.arch;
  GgmlDynAllocator cpu(32);
  host_inputs(cpu, a, std::max<u64>(copies, 1), n_kv, tokens);
  if (host_experts) host_expert_layer(cpu, a, s, tokens);
  return cpu.max_size();
}

// Each device's layers, output, KV cache and compute buffer (llama_kv_cache puts a layer's K
// and V on the layer's device; each device computes its layers, the output's device the
// logits); what the CPU layers keep in host memory.
// Under pipeline parallelism (copies not empty) a device holds its copies beside the moments,
// and the mask of the attention moment is among them.
std::vector<ServeDevice> device_shares(const LlamaCppPlacement& p, u64 layer_bytes,
                                       const ComputeBuffer& c, const std::vector<u64>& copies,
                                       const std::vector<bool>& experts_at, u64* host_kv) {
  std::vector<ServeDevice> d(p.names.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i].name = p.names[i];
  *host_kv = 0;
  for (const int dev : p.layer_device) {
    if (dev == kLlamaHost) {
      *host_kv = checked_add(*host_kv, layer_bytes);
      continue;
    }
    ServeDevice& x = d[static_cast<std::size_t>(dev)];
    ++x.layers;
    x.kv_bytes = checked_add(x.kv_bytes, layer_bytes);
  }
  if (p.output_device != kLlamaHost) d[static_cast<std::size_t>(p.output_device)].output = true;
  for (std::size_t i = 0; i < d.size(); ++i) {
    ServeDevice& x = d[i];
    const u64 attention = x.layers > 0 ? (copies.empty() ? c.attention : c.attention - c.mask) : 0;
    const u64 moe = experts_at[i] ? c.moe : 0;
    x.compute_buffer_bytes = std::max({attention, moe, x.output ? c.output : 0});
    if (!copies.empty()) x.compute_buffer_bytes = checked_add(x.compute_buffer_bytes, copies[i]);
  }
  return d;
}

// Per device, whether it computes some MoE layer's routed experts: a layer's device, unless the
// layer's experts are kept in host memory; then the host, or the first GPU when a GPU takes
// them over (`gpu_takes`): ggml_backend_sched_backend_id_from_cur offloads to the first backend
// whose offload_op agrees.
std::vector<bool> expert_devices(const Architecture& a, const LlamaCppPlacement& p,
                                 const std::vector<bool>& host_experts, bool gpu_takes) {
  std::vector<bool> at(p.names.size(), false);
  const u64 first = a.num_layers - std::min(a.moe_layers, a.num_layers);
  for (u64 il = a.num_experts > 0 ? first : a.num_layers; il < p.layer_device.size(); ++il) {
    const int d = p.layer_device[static_cast<std::size_t>(il)];
    const bool host = il < host_experts.size() && host_experts[static_cast<std::size_t>(il)];
    if (d != kLlamaHost && !host) at[static_cast<std::size_t>(d)] = true;
    if (host && gpu_takes && !at.empty()) at.front() = true;
  }
  return at;
}

// The figures of one device at the top of the estimate: the fullest one (weights, KV cache and
// compute buffer), which is the only one with a single device.
void show_fullest(ServeEstimate& e, const ComputeBuffer& c, const std::string& kv_basis) {
  const auto total = [](const ServeDevice& x) {
    return x.weights_bytes + x.kv_bytes + x.compute_buffer_bytes;
  };
  const ServeDevice* top = &e.per_device.front();
  for (const ServeDevice& x : e.per_device) {
    if (total(x) > total(*top)) top = &x;
  }
  if (e.weights_bytes) e.weights_bytes = top->weights_bytes;
  e.kv_bytes = top->kv_bytes;
  e.kv_bytes_per_token = e.kv_bytes / e.context;
  e.kv_basis = fmt::format("{} cells x {} layers x {}", e.context, top->layers, kv_basis);
  e.compute_buffer_bytes.reset();
  e.compute_basis.clear();
  if (top->layers > 0 || top->output) {
    e.compute_buffer_bytes = top->compute_buffer_bytes;
    // The experts' moment where the device holds it (it computes experts) and it outweighs the
    // attention's; the output's where it outweighs that.
    const bool moe = c.moe > c.attention && top->compute_buffer_bytes >= c.moe;
    const bool output = top->output && c.output >= (moe ? c.moe : c.attention);
    e.compute_basis = output ? c.output_basis : moe ? c.moe_basis : c.attention_basis;
  }
  if (e.per_device.size() > 1) {
    e.notes.push_back(
        fmt::format("figures of {}, the fullest of {} devices", top->name, e.per_device.size()));
  }
}

// The weights placed: each device's, the host's, and the note of the host's share.
void add_weights(ServeEstimate& e, const LlamaCppPlacement& p, const LlamaCppSettings& s,
                 const LlamaWeightsInput& w) {
  const LlamaWeightBytes b = place_llama_cpp_weights(w.tensors, p, s);
  for (std::size_t i = 0; i < b.device.size(); ++i) e.per_device[i].weights_bytes = b.device[i];
  e.weights_bytes = 0;
  e.weights_basis = w.basis;
  e.host_weights_bytes = b.host;
  const bool cpu_layers = std::any_of(p.layer_device.begin(), p.layer_device.end(),
                                      [](int d) { return d == kLlamaHost; });
  const std::string moved =
      b.overridden > 0 ? fmt::format(", {} tensors by --override-tensor", b.overridden) : "";
  e.notes.push_back(fmt::format("{} of weights in host memory (token_embd{}{})",
                                format_bytes(b.host, Unit::MiB), moved,
                                cpu_layers ? " and the CPU layers" : ""));
}

// ik_llama.cpp's MLA prompt path: each device's compute buffer from the graph (ggml's allocator
// over build_deepseek2's tensors, src/serve/ik_mla_graph.cpp), its pipeline copies (`copies`
// not empty: sched_copies of each split input) among the graph's tensors. The attention moment
// of `c` becomes the f16 keys and values of every head (what the basis names when it outweighs
// the output's logits); the graph holds the experts too.
void mla_compute_buffers(ServeEstimate& e, ComputeBuffer& c, const Architecture& a,
                         const LlamaCppPlacement& p, const LlamaCppSettings& s, u64 tokens,
                         const std::vector<bool>& host_experts, bool gpu_takes,
                         const std::vector<u64>& copies) {
  const std::vector<u64> bytes = mla_prompt_buffers(a, p, s, e.context, tokens, host_experts,
                                                    gpu_takes, copies.empty() ? 1 : s.sched_copies);
  for (std::size_t i = 0; i < e.per_device.size(); ++i) {
    ServeDevice& x = e.per_device[i];
    if (x.layers > 0 || x.output) x.compute_buffer_bytes = bytes[i];
  }
  const u64 width = a.qk_rope_head_dim + a.qk_nope_head_dim + a.v_head_dim;  // K and V
  c.attention = checked_mul(checked_mul(checked_mul(a.num_heads, e.context), width), 2);
  c.moe = 0;
  const u64 heads = mla_group_heads(a, s.attn_max_batch, e.context);
  const u64 groups = a.num_heads / heads;
  c.attention_basis = fmt::format(
      "keys and values of {} heads x {} cells in f16 ({}), all made before the first flash "
      "attention",
      a.num_heads, e.context,
      groups == 1 ? "one group" : fmt::format("{} groups of {}", groups, heads));
}

// ik_llama.cpp's Qwen3-MoE graph with weights in host memory: each device's compute buffer from
// the graph (src/serve/ik_gqa_graph.cpp), the GPU's copies of those weights among its tensors.
// The experts' moment of `c` becomes the first GPU's buffer, which holds the copies, and its
// basis names the copies of the largest layer's host-kept experts.
void gqa_compute_buffers(ServeEstimate& e, ComputeBuffer& c, const Architecture& a,
                         const LlamaCppPlacement& p, const LlamaCppSettings& s,
                         const PlacedWeights& w, u64 tokens, const std::vector<u64>& copies) {
  const std::vector<u64> bytes = gqa_prompt_buffers(
      a, p, s, w, e.context, tokens, gpu_expert_batch(a, s), copies.empty() ? 1 : s.sched_copies);
  for (std::size_t i = 0; i < e.per_device.size(); ++i) {
    ServeDevice& x = e.per_device[i];
    if (x.layers > 0 || x.output) x.compute_buffer_bytes = bytes[i];
  }
  std::map<u64, u64> host_experts;  // by layer
  for (const auto& [name, at] : w) {
    if (at.device == kLlamaHost && at.layer && name.find("_exps.") != std::string::npos)
      host_experts[*at.layer] = checked_add(host_experts[*at.layer], at.bytes);
  }
  u64 largest = 0;
  for (const auto& [layer, b] : host_experts) largest = std::max(largest, b);
  c.moe = bytes.front();
  c.moe_basis = fmt::format("{} and copies of a layer's experts kept in host memory ({} a layer)",
                            c.moe_basis, format_bytes(largest, Unit::MiB));
}

// llama.cpp's loader keeps per-layer hyperparameters in arrays of LLAMA_MAX_LAYERS (512) and
// refuses a model of more layers (llama_model_loader::get_key_or_arr, "n > N_MAX";
// src/llama-hparams.h and src/llama-model-loader.cpp of ik_llama.cpp at 8337e4cd3), so a model
// of more is refused here too, before its layers are split one by one.
void check_layer_count(const ServeModel& m) {
  constexpr u64 kLlamaMaxLayers = 512;
  const u64 layers = m.spec.arch->num_layers;
  if (layers <= kLlamaMaxLayers) return;
  throw Error(
      fmt::format("--engine llama.cpp: {} has {} layers; llama.cpp loads at most {} "
                  "(LLAMA_MAX_LAYERS)",
                  m.spec.name, layers, kLlamaMaxLayers));
}

}  // namespace

std::span<const GgmlType> ggml_cache_types() { return kCacheTypes; }

constexpr auto kCacheTypeNames = detail::row_names(kCacheTypes);

std::span<const std::string_view> ggml_cache_type_names() { return kCacheTypeNames; }

ServeEstimate estimate_llama_cpp_weights(const ServeModel& m, const LlamaCppSettings& s,
                                         const LlamaWeightsInput* w) {
  const Architecture& a = *m.spec.arch;
  check_layer_count(m);
  check_cache_types(s);
  ServeEstimate e;
  e.engine = ServeEngine::llama_cpp;
  e.model = m.spec.name;
  const u64 ctx = s.ctx_size > 0 ? s.ctx_size : m.max_positions;
  if (ctx == 0) throw Error("--ctx-size: the config has no max_position_embeddings");
  e.context = ceil_div(ctx, s.flash_attn ? 256 : 32) * (s.flash_attn ? 256 : 32);
  const LayerKv kv = layer_kv(a, s, e.context);
  const LlamaCppPlacement p = place_llama_cpp_layers(a.num_layers, s);
  const u64 tokens = std::min({s.ubatch_size, s.batch_size, e.context});
  ComputeBuffer c = compute_buffer(a, e.context, tokens, s.flash_attn);
  u64 host_kv = 0;
  const std::vector<u64> copies = pipeline_copies(a, s, p, e.context, tokens);
  const std::vector<bool> host_experts = layers_with_host_experts(a, p, s);
  const auto expert_layers =
      static_cast<u64>(std::count(host_experts.begin(), host_experts.end(), true));
  const u64 gpu_from = gpu_expert_batch(a, s);
  e.per_device = device_shares(p, kv.bytes, c, copies,
                               expert_devices(a, p, host_experts, tokens >= gpu_from), &host_kv);
  const PlacedWeights placed =
      w ? placed_weights(w->tensors, llama_cpp_devices(w->tensors, p, s)) : PlacedWeights{};
  const bool gqa = ik_llama(s) && tokens >= gpu_from && gqa_graph_path(a, s, p, placed);
  const bool mla = mla_prompt_path(a, s, p, tokens);
  if (mla) {
    mla_compute_buffers(e, c, a, p, s, tokens, host_experts, tokens >= gpu_from, copies);
  } else if (gqa) {
    gqa_compute_buffers(e, c, a, p, s, placed, tokens, copies);
  }
  if (!mla && s.attn_max_batch > 0) {
    e.notes.push_back(
        "--attention-max-batch is modelled on ik_llama.cpp's MLA prompt path only (--mla, "
        "--flash-attn, 128 tokens or more); its split of other attention is not");
  }
  e.host_compute_buffer_bytes =
      host_compute(m, p, s, copies.empty() ? 1 : s.sched_copies, e.context, tokens,
                   expert_layers > 0 && tokens < gpu_from);
  e.devices = p.names.size();
  e.devices_shown = s.per_device;
  e.host_kv_bytes = host_kv;
  e.kv_tokens = e.context;
  const u64 cpu_layers = host_kv / std::max<u64>(kv.bytes, 1);
  if (host_kv > 0) {
    e.notes.push_back(fmt::format("the KV cache of {} layers ({}) stays in host memory", cpu_layers,
                                  format_bytes(host_kv, Unit::MiB)));
  }
  if (!w) place_llama_cpp_weights({}, p, s);  // --override-tensor checked without weights
  if (w && !w->note_last) add_weights(e, p, s, *w);
  if (m.attention.sliding > 0) {
    e.notes.push_back("sliding-window layers keep the whole context (no iSWA cache modelled)");
  }
  if (w && w->note_last) add_weights(e, p, s, *w);
  note_host_experts(e, expert_layers, tokens, gpu_from, gqa);
  show_fullest(e, c, kv.basis);
  return e;
}

ServeEstimate estimate_llama_cpp(const ServeModel& m, const LlamaCppSettings& s) {
  if (s.quantization.empty()) return estimate_llama_cpp_weights(m, s, nullptr);
  GgufWeights g = gguf_weights(m, s.quantization, s.quantizer, s.custom_q);
  LlamaWeightsInput w;
  w.tensors = std::move(g.tensors);
  std::vector<std::string> counts;
  for (const auto& [type, n] : g.tensors_by_type) counts.push_back(fmt::format("{} {}", n, type));
  w.basis = fmt::format("{}: {} tensors", s.quantization, fmt::join(counts, " + "));
  return estimate_llama_cpp_weights(m, s, &w);
}

}  // namespace memest
