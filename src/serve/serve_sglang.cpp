// SGLang's pools on one tensor-parallel rank, read from SGLang's source (github
// sgl-project/sglang): python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py at commit
// 001ccef0072a4537d4ec6bdd50a73e6feb2c907d (get_cell_size_per_token, profile_max_num_token,
// init_memory, set_num_tokens_hybrid_swa), the default mem_fraction_static of
// python/sglang/srt/server_args.py's _handle_gpu_memory_settings of the same v0.5 line, the pool
// buffers of python/sglang/srt/mem_cache/memory_pool.py (MHATokenToKVPool: size + page_size
// rows per layer, the padded page 0 for dummy writes; ReqToTokenPool: an int32 table of
// requests x max_context_len) and the is_hybrid_swa_model architectures of
// python/sglang/srt/configs/model_config.py.
#include "serve/serve_weights.hpp"

#include <memest/error.hpp>
#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace memest {
namespace {

constexpr double kSglGiB = 1ULL << 30;
constexpr double kSglMiB = 1ULL << 20;

// data table: _handle_gpu_memory_settings's rows (CUDA GPUs): below `below_gib` GiB of GPU
// memory, the chunked prefill and the largest CUDA-graph batch under TP < 4 and TP >= 4.
struct SglGpuRow {
  double below_gib;
  std::uint64_t chunked_prefill;
  std::uint64_t graph_bs_small_tp;
  std::uint64_t graph_bs_large_tp;
};
constexpr std::array<SglGpuRow, 6> kSglGpuRows = {
    {{20, 2048, 8, 8},          // T4, 4080
     {35, 2048, 24, 80},        // A10, 4090, 5090
     {60, 4096, 32, 160},       // A100 40GB, L40
     {90, 8192, 256, 512},      // H100, A100 80GB
     {160, 8192, 256, 512},     // H20, H200
     {1e30, 16384, 512, 512}},  // B200, MI300
};

// SGLang's --kv-cache-dtype values modelled; the fp8 ones store one byte per element.
// data table
constexpr std::array<std::string_view, 3> kSglangKvCacheDtypes = {"auto", "fp8_e5m2", "fp8_e4m3"};
// data table
constexpr std::array<std::string_view, 4> kSglangDtypeNames = {"auto", "half", "float16",
                                                               "bfloat16"};

// The architectures whose pool SGLang splits into full and sliding-window layers
// (is_hybrid_swa_model), by their config's model_type; other sliding-window models (Gemma-2 and
// 3, Mistral) keep every layer's KV for the whole pool.
bool sgl_hybrid_swa(const ServeModel& m) {
  const std::string& t = m.spec.arch->model_type;
  const bool listed = t == "gpt_oss" || t == "llama4" || t == "mimo_v2_flash" || t == "step3p5";
  return listed && m.attention.full > 0 && m.attention.sliding > 0;
}

// swa_full_tokens_ratio's default (server_args.py): the sliding layers' pool holds 0.8 times
// the full layers' tokens.
constexpr double kSglSwaFullTokensRatio = 0.8;

struct SglPools {
  std::uint64_t full_tokens = 0;
  std::uint64_t swa_tokens = 0;
  bool hybrid = false;
};

// set_num_tokens_hybrid_swa: the profiled memory (tokens x every layer's cell) re-cut so that
// the sliding layers hold ratio x the full layers' tokens, both aligned down to pages.
SglPools sgl_pools(const ServeModel& m, std::uint64_t tokens, std::uint64_t per_layer,
                   std::uint64_t page) {
  if (!sgl_hybrid_swa(m)) return {.full_tokens = tokens};
  const double full_layers = static_cast<double>(m.attention.full);
  const double swa_layers = static_cast<double>(m.attention.sliding);
  const double f = static_cast<double>(per_layer);
  const double memory = static_cast<double>(tokens) * (f * full_layers + f * swa_layers);
  const double denominator = f * full_layers + kSglSwaFullTokensRatio * f * swa_layers;
  const auto full = static_cast<std::uint64_t>(memory / denominator);
  const auto swa = static_cast<std::uint64_t>(static_cast<double>(full) * kSglSwaFullTokensRatio);
  return {.full_tokens = full / page * page, .swa_tokens = swa / page * page, .hybrid = true};
}

u64 sgl_kv_width(const SglangSettings& s, Dtype dtype) {
  return s.kv_cache_dtype == "auto" ? width(dtype) : 1;  // fp8_e5m2, fp8_e4m3
}

// The weights as vLLM's formats store them (SGLang's linear methods keep the same tensors).
StoredWeights sgl_weights(const ServeModel& m, const SglangSettings& s) {
  VllmSettings v;
  v.tensor_parallel_size = s.tp_size;
  v.quantization = s.quantization;
  v.dtype = s.dtype;
  return vllm_weights_per_rank(m, v);
}

void sgl_check(const ServeModel& m, const SglangSettings& s) {
  const Architecture& a = *m.spec.arch;
  if (s.tp_size == 0 || a.num_heads % s.tp_size != 0) {
    throw Error(
        fmt::format("--tensor-parallel-size: {} does not divide the model's {} attention heads",
                    s.tp_size, a.num_heads));
  }
  if (s.page_size == 0) throw Error("--page-size: must be at least 1");
  if (s.context_length > 0 && m.max_positions > 0 && s.context_length > m.max_positions) {
    throw Error(fmt::format(
        "--context-length: SGLang refuses {} above the model's max_position_embeddings {} "
        "(model_config.py, unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set)",
        s.context_length, m.max_positions));
  }
}

// profile_max_num_token: the memory left after the weights less the reserve (1 -
// mem_fraction_static) x total, in GiB as SGLang computes it, divided by the cell size.
std::uint64_t sgl_profiled_tokens(u64 total, u64 weights, double fraction, u64 cell) {
  const double available_gb = static_cast<double>(total - std::min(total, weights)) / kSglGiB;
  const double total_gb = static_cast<double>(total) / kSglGiB;
  const double rest_gb = available_gb - total_gb * (1.0 - fraction);
  if (!(rest_gb > 0)) return 0;
  return static_cast<std::uint64_t>(rest_gb * kSglGiB) / cell;
}

// init_memory's request pool: max_running_requests, else min(max(tokens / context_len x 512,
// 2048), 4096) from the profiled tokens (before --max-total-tokens caps them).
std::uint64_t sgl_request_pool(const SglangSettings& s, std::uint64_t profiled, u64 context) {
  if (s.max_running_requests) return *s.max_running_requests;
  const auto scaled = static_cast<std::uint64_t>(static_cast<double>(profiled) /
                                                 static_cast<double>(context) * 512.0);
  return std::min<std::uint64_t>(std::max<std::uint64_t>(scaled, 2048), 4096);
}

void sgl_fill_kv(ServeEstimate& e, const ServeModel& m, const SglangSettings& s, u64 per_layer,
                 const SglPools& p) {
  const u64 layers = m.spec.arch->num_layers;
  const u64 page = s.page_size;
  e.kv_tokens = p.full_tokens;
  e.kv_bytes_per_token = checked_mul(per_layer, layers);
  if (p.hybrid) {
    e.swa_tokens = p.swa_tokens;
    const u64 full = checked_mul(checked_mul(p.full_tokens + page, per_layer), m.attention.full);
    const u64 swa = checked_mul(checked_mul(p.swa_tokens + page, per_layer), m.attention.sliding);
    e.kv_bytes = checked_add(full, swa);
    e.kv_basis = fmt::format(
        "{} B per token and layer; {} full layers of {} tokens, {} sliding of {} (SWA pool, "
        "ratio {}), each + {} padded",
        per_layer, m.attention.full, format_count(p.full_tokens), m.attention.sliding,
        format_count(p.swa_tokens), kSglSwaFullTokensRatio, page);
    return;
  }
  e.kv_bytes = checked_mul(checked_add(p.full_tokens, page), e.kv_bytes_per_token);
  e.kv_basis = fmt::format("{} B per token and layer, {} layers; {} tokens + {} padded", per_layer,
                           layers, format_count(p.full_tokens), page);
}

}  // namespace

std::span<const std::string_view> sglang_kv_cache_dtypes() { return kSglangKvCacheDtypes; }
std::span<const std::string_view> sglang_dtype_names() { return kSglangDtypeNames; }

SglangMemoryDefaults sglang_memory_defaults(const SglangSettings& s) {
  const double gpu_mib = static_cast<double>(s.total_memory) / kSglMiB;
  const SglGpuRow& row =
      *std::find_if(kSglGpuRows.begin(), kSglGpuRows.end(),
                    [&](const SglGpuRow& r) { return gpu_mib < r.below_gib * 1024; });
  SglangMemoryDefaults d;
  d.chunked_prefill_size = s.chunked_prefill_size.value_or(row.chunked_prefill);
  d.cuda_graph_max_bs =
      s.cuda_graph_max_bs.value_or(s.tp_size < 4 ? row.graph_bs_small_tp : row.graph_bs_large_tp);
  // Constant metadata 512 MiB, the prefill's activations, the graphs, and more under TP (pp 1).
  double reserved = 512.0;
  reserved += static_cast<double>(std::max<std::uint64_t>(d.chunked_prefill_size, 2048)) * 1.5;
  reserved += static_cast<double>(d.cuda_graph_max_bs) * 2.0;
  reserved += static_cast<double>(s.tp_size) / 8.0 * 1024.0;
  if (gpu_mib > 60.0 * 1024) reserved = std::max(reserved, 10.0 * 1024);
  d.reserved_mib = reserved;
  d.mem_fraction_static = std::round((gpu_mib - reserved) / gpu_mib * 1000.0) / 1000.0;
  return d;
}

namespace {

// mem_fraction_static: the given one, else SGLang's default for the device and TP.
double sgl_fraction(const SglangSettings& s, const SglangMemoryDefaults& d) {
  const double fraction = s.mem_fraction_static.value_or(d.mem_fraction_static);
  if (!(fraction > 0)) {
    throw Error(fmt::format(
        "--mem-fraction-static: SGLang's default is {} on {} (it reserves {:.0f} MiB); give one",
        fraction, format_bytes(s.total_memory, Unit::GiB), d.reserved_mib));
  }
  return fraction;
}

}  // namespace

u64 sglang_budget(const SglangSettings& s) {
  const double fraction = sgl_fraction(s, sglang_memory_defaults(s));
  return static_cast<u64>(std::floor(static_cast<double>(s.total_memory) * fraction));
}

ServeEstimate estimate_sglang(const ServeModel& m, const SglangSettings& s) {
  sgl_check(m, s);
  const Architecture& a = *m.spec.arch;
  ServeEstimate e;
  e.engine = ServeEngine::sglang;
  e.model = m.spec.name;
  e.devices = s.tp_size;
  e.context = s.context_length > 0 ? s.context_length : m.max_positions;
  if (e.context == 0) throw Error("--context-length: the config has no max_position_embeddings");
  const Dtype dtype = s.dtype.value_or(m.dtype);
  const StoredWeights w = sgl_weights(m, s);
  e.weights_bytes = w.bytes;
  e.weights_basis = w.basis;
  const u64 per_layer = kv_bytes_per_layer_token(a, sgl_kv_width(s, dtype), s.tp_size);
  if (per_layer == 0) throw Error("serve: the model caches no keys or values (no attention)");
  const u64 cell = checked_mul(per_layer, a.num_layers);
  const SglangMemoryDefaults d = sglang_memory_defaults(s);
  const double fraction = sgl_fraction(s, d);
  e.budget_bytes = sglang_budget(s);
  e.budget_basis = fmt::format("mem_fraction_static {} x total", fraction);
  const u64 profiled = sgl_profiled_tokens(s.total_memory, w.bytes, fraction, cell);
  if (profiled == 0) {
    throw Error(fmt::format(
        "serve: SGLang would not start (\"Not enough memory. Please try to increase "
        "--mem-fraction-static\"): weights {} leave nothing of mem_fraction_static {} x total = {}",
        format_bytes(w.bytes, Unit::GiB), fraction, format_bytes(*e.budget_bytes, Unit::GiB)));
  }
  const u64 requests = sgl_request_pool(s, profiled, e.context);
  u64 tokens = std::min(profiled, s.max_total_tokens.value_or(profiled));
  tokens = tokens / s.page_size * s.page_size;
  const SglPools pools = sgl_pools(m, tokens, per_layer, s.page_size);
  if (pools.full_tokens == 0) throw Error("serve: the KV pool holds no page");
  sgl_fill_kv(e, m, s, per_layer, pools);
  e.request_pool_size = requests;
  e.request_pool_bytes = checked_mul(checked_mul(requests, e.context + 4), 4);
  e.max_running_requests =
      std::min(s.max_running_requests.value_or(pools.full_tokens / 2), requests);
  e.max_concurrency = static_cast<double>(*e.max_running_requests);
  if (s.disable_cuda_graph) e.cuda_graphs_bytes = 0;
  e.notes.push_back(fmt::format(
      "the activations, CUDA graphs and the request pool come out of the reserve (1 - {}) x "
      "total; SGLang's default reserves {:.0f} MiB (chunked prefill {}, cuda_graph_max_bs {})",
      fraction, d.reserved_mib, d.chunked_prefill_size, d.cuda_graph_max_bs));
  e.notes.push_back(
      fmt::format("the KV pool holds {:.2f} requests of {} tokens",
                  static_cast<double>(pools.full_tokens) / static_cast<double>(e.context),
                  format_count(e.context)));
  if (s.max_total_tokens && *s.max_total_tokens > profiled) {
    e.notes.push_back(
        fmt::format("--max-total-tokens {} is above the profiled {}: SGLang keeps the "
                    "profiled value",
                    *s.max_total_tokens, profiled));
  }
  return e;
}

}  // namespace memest
