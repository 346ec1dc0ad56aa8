// `memest serve`: the serve flags as one table (each engine's own flag names, so a launch line
// can be pasted), read into the engine's settings, estimated and rendered. The flags have their
// own table rather than rows of the run-option table: they describe an inference server, not a
// training run, and no training flag applies here.
#include "base/numbers.hpp"
#include "serve/gguf_header.hpp"
#include "serve/serve_render.hpp"

#include <memest/error.hpp>
#include <memest/hardware.hpp>
#include <memest/serve.hpp>
#include <memest/serve_fit.hpp>
#include <memest/suggest.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>

namespace memest {
namespace {

enum class For { both, vllm, llama_cpp };

struct ServeFlag {
  std::string_view flag;
  For engine;
  std::string_view type;  // "" for a switch
  std::string_view help;
};

// data table
constexpr std::array<ServeFlag, 39> kFlags = {{
    {"--model", For::both, "NAME", "Model preset, Hub id (local cache) or model folder"},
    {"--config", For::both, "PATH", "A Hugging Face config.json"},
    {"--engine", For::both, "NAME", "vllm or llama.cpp (default vllm)"},
    {"--gpu", For::both, "NAME", "GPU preset: its memory is the total (default h100-80gb)"},
    {"--gpu-memory", For::both, "SIZE",
     "Total device memory as torch.cuda.mem_get_info reports it (overrides --gpu)"},
    {"--format", For::both, "FORMAT", "table, json or markdown (default table)"},
    {"--units", For::both, "UNIT", "Units of the table (default GiB)"},
    {"--max-model-len", For::vllm, "N", "Longest request in tokens (default: the model's)"},
    {"--max-num-seqs", For::vllm, "N", "Requests per step (default 1024 on >= 70 GiB, else 256)"},
    {"--max-num-batched-tokens", For::vllm, "N",
     "Tokens per step (default 8192 on >= 70 GiB, else 2048)"},
    {"--gpu-memory-utilization", For::vllm, "F", "Fraction of the total vLLM may use (0.9)"},
    {"--kv-cache-dtype", For::vllm, "NAME", "auto, fp8, fp8_e4m3 or fp8_e5m2 (default auto)"},
    {"--dtype", For::vllm, "NAME", "auto, bfloat16, float16 (default auto: the config's)"},
    {"--quantization", For::both, "NAME",
     "vllm: fp8, compressed-tensors (FP8 weights), gptq, gptq_marlin, awq, awq_marlin (the "
     "checkpoint's int4/int8 groups), bitsandbytes (NF4); llama.cpp: a GGUF file type (Q4_K_M, "
     "...)"},
    {"--tensor-parallel-size", For::vllm, "N", "Tensor-parallel ranks (default 1)"},
    {"--tp", For::vllm, "N", "Short for --tensor-parallel-size"},
    {"--block-size", For::vllm, "N", "Tokens per KV block (default 16)"},
    {"--enforce-eager", For::vllm, "", "No CUDA graphs"},
    {"--kv-cache-memory", For::vllm, "BYTES", "KV-cache bytes per device, instead of the budget"},
    {"--non-torch-memory", For::vllm, "SIZE",
     "Memory the profile run adds outside torch (default 0.25 GiB, 2 GiB under TP)"},
    {"--ctx-size", For::llama_cpp, "N", "Context cells (default: the model's)"},
    {"--batch-size", For::llama_cpp, "N", "Logical batch (default 2048)"},
    {"--ubatch-size", For::llama_cpp, "N", "Micro-batch the compute buffer is sized for (512)"},
    {"--parallel", For::llama_cpp, "N", "Sequences sharing the context (default 1)"},
    {"--cache-type-k", For::llama_cpp, "TYPE", "f16, q8_0, q4_0, ... (default f16)"},
    {"--cache-type-v", For::llama_cpp, "TYPE", "f16, q8_0, q4_0, ... (default f16)"},
    {"--n-gpu-layers", For::llama_cpp, "N", "Layers on the GPU (default all)"},
    {"--flash-attn", For::llama_cpp, "", "Flash attention (pads the context to 256)"},
    {"--gguf", For::llama_cpp, "FILE",
     "A GGUF file: its header's tensor types size the weights, its metadata is the model "
     "without --model"},
    {"--mla", For::llama_cpp, "", "MLA models: cache the latent only (ik_llama.cpp -mla 2/3)"},
    {"--device", For::llama_cpp, "LIST",
     "The GPUs to use, comma-separated (CUDA0,CUDA1,...; default CUDA0), each a --gpu"},
    {"--split-mode", For::llama_cpp, "MODE",
     "none (--main-gpu only), layer (layers by --tensor-split) or row (matrices split by rows "
     "too) (default layer)"},
    {"--tensor-split", For::llama_cpp, "LIST",
     "Each device's share, comma-separated (3,1; default: by free memory, equal here)"},
    {"--main-gpu", For::llama_cpp, "N", "The device of --split-mode none (default 0)"},
    {"--override-tensor", For::llama_cpp, "LIST",
     "PATTERN=BUFT,...: tensors whose name matches the regex go to CPU or a device (exps=CPU)"},
    {"--fit", For::both, "WHAT",
     "context or concurrency: the largest --max-model-len/--ctx-size or "
     "--max-num-seqs/--parallel that fits, per weight format and KV-cache type"},
    {"--max", For::both, "N",
     "--fit: the largest value tried (default: the model's positions "
     "for a context; max_num_batched_tokens or n_ctx's 2^32 - 1 cells "
     "for concurrency)"},
    {"--help", For::both, "", "This help"},
    {"-h", For::both, "", "This help"},
}};

const ServeFlag* find_flag(std::string_view name) {
  for (const ServeFlag& f : kFlags) {
    if (f.flag == name) return &f;
  }
  return nullptr;
}

std::string help_text() {
  std::string s =
      "memest serve: the memory an inference engine allocates per device for a model\n"
      "Usage: memest serve --model NAME [--engine vllm|llama.cpp] [engine flags]\n\n";
  for (const ServeFlag& f : kFlags) {
    if (f.flag == "-h") continue;
    const std::string_view who = f.engine == For::vllm        ? "[vllm] "
                                 : f.engine == For::llama_cpp ? "[llama.cpp] "
                                                              : "";
    s += fmt::format("  {:<32} {}{}\n", fmt::format("{} {}", f.flag, f.type), who, f.help);
  }
  return s + "\nUnits: GB = 10^9 bytes, GiB = 2^30 bytes. See docs/serving.md.\n";
}

// The flags given, by name; `--name=value` and `--name value` alike.
std::map<std::string, std::string> read_flags(std::span<const std::string> args) {
  std::map<std::string, std::string> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos && name.starts_with("--");
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const ServeFlag* f = find_flag(name);
    if (!f) {
      std::vector<std::string_view> names;
      names.reserve(kFlags.size());
      for (const ServeFlag& g : kFlags) names.push_back(g.flag);
      throw Error(fmt::format("serve: unknown flag \"{}\"{} (see memest serve --help)", name,
                              did_you_mean(name, names)));
    }
    if (given.contains(name)) throw Error(fmt::format("{}: given twice", name));
    if (!f->type.empty() && !inline_value) {
      if (i + 1 >= args.size()) throw Error(fmt::format("{}: needs a value ({})", name, f->type));
      value = args[++i];
    }
    given[name] = value;
  }
  return given;
}

u64 count_of(const std::map<std::string, std::string>& g, const std::string& flag, u64 fallback) {
  const auto it = g.find(flag);
  if (it == g.end()) return fallback;
  try {
    return parse_count(it->second);
  } catch (const Error& e) {
    rethrow_with_context(e, flag);
  }
}

std::optional<u64> size_of(const std::map<std::string, std::string>& g, const std::string& flag) {
  const auto it = g.find(flag);
  if (it == g.end()) return std::nullopt;
  const std::string& v = it->second;
  u64 n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc() && end == v.data() + v.size()) return n;  // vLLM's bare byte count
  try {
    return parse_bytes(v);
  } catch (const Error& e) {
    rethrow_with_context(e, flag);
  }
}

std::string choice(const std::map<std::string, std::string>& g, const std::string& flag,
                   std::string fallback, std::initializer_list<std::string_view> accepted) {
  const auto it = g.find(flag);
  if (it == g.end()) return fallback;
  if (std::find(accepted.begin(), accepted.end(), it->second) == accepted.end()) {
    throw Error(fmt::format("{}: \"{}\" is not offered (expected one of: {})", flag, it->second,
                            fmt::join(accepted, ", ")));
  }
  return it->second;
}

double fraction(const std::map<std::string, std::string>& g, const std::string& flag,
                double fallback) {
  const auto it = g.find(flag);
  if (it == g.end()) return fallback;
  double v = 0;
  const std::string& t = it->second;
  if (!parse_double(t, v) || !(v > 0.0) || v > 1.0) {
    throw Error(fmt::format("{}: expected a fraction in (0, 1], got \"{}\"", flag, t));
  }
  return v;
}

// The engine's flags given to the other engine are refused, never ignored.
void check_engine(const std::map<std::string, std::string>& g, ServeEngine engine) {
  for (const auto& [name, value] : g) {
    const For f = find_flag(name)->engine;
    if (f == For::both) continue;
    if ((f == For::vllm) != (engine == ServeEngine::vllm)) {
      throw Error(fmt::format("{}: a {} flag, not used by --engine {}", name,
                              f == For::vllm ? "vLLM" : "llama.cpp",
                              engine == ServeEngine::vllm ? "vllm" : "llama.cpp"));
    }
  }
}

u64 total_memory(const std::map<std::string, std::string>& g, std::string* gpu_label) {
  if (auto m = size_of(g, "--gpu-memory")) {
    *gpu_label = fmt::format("{} total", format_bytes(*m, Unit::GiB));
    return *m;
  }
  const auto it = g.find("--gpu");
  const Gpu& gpu = find_gpu(it == g.end() ? "h100-80gb" : it->second);
  *gpu_label = std::string(gpu.name);
  return gpu.capacity;
}

VllmSettings vllm_settings(const std::map<std::string, std::string>& g, u64 total) {
  VllmSettings s;
  s.total_memory = total;
  // vLLM's engine/arg_utils.py (get_batch_defaults, v0.19.0): the OpenAI server's defaults on
  // devices of >= 70 GiB (the A100s excepted) and on the others.
  const bool large = total >= 70 * (1ULL << 30);
  s.gpu_memory_utilization = fraction(g, "--gpu-memory-utilization", 0.9);
  s.max_model_len = count_of(g, "--max-model-len", 0);
  s.max_num_seqs = count_of(g, "--max-num-seqs", large ? 1024 : 256);
  s.max_num_batched_tokens = count_of(g, "--max-num-batched-tokens", large ? 8192 : 2048);
  if (g.contains("--tp") && g.contains("--tensor-parallel-size")) {
    throw Error("--tp: give --tp or --tensor-parallel-size, not both");
  }
  s.tensor_parallel_size = count_of(g, g.contains("--tp") ? "--tp" : "--tensor-parallel-size", 1);
  s.block_size = count_of(g, "--block-size", 16);
  s.kv_cache_dtype = choice(g, "--kv-cache-dtype", "auto", {"auto", "fp8", "fp8_e4m3", "fp8_e5m2"});
  s.quantization = choice(
      g, "--quantization", "",
      {"fp8", "compressed-tensors", "gptq", "gptq_marlin", "awq", "awq_marlin", "bitsandbytes"});
  const std::string dtype =
      choice(g, "--dtype", "auto", {"auto", "bfloat16", "bf16", "float16", "fp16", "half"});
  if (dtype != "auto") s.dtype = dtype.starts_with("b") ? Dtype::bf16 : Dtype::fp16;
  s.enforce_eager = g.contains("--enforce-eager");
  s.kv_cache_memory = size_of(g, "--kv-cache-memory");
  s.non_torch_memory = size_of(g, "--non-torch-memory");
  return s;
}

// A comma-separated list, each item non-empty.
std::vector<std::string> comma_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = text.find(',', at);
    items.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (items.back().empty()) throw Error(fmt::format("{}: an empty item in \"{}\"", flag, text));
    if (comma == std::string::npos) return items;
    at = comma + 1;
  }
}

// llama.cpp's multi-GPU flags (common/arg.cpp): --device names, --split-mode, --tensor-split's
// shares, --main-gpu, and --override-tensor's PATTERN=BUFT pairs.
void read_split_flags(const std::map<std::string, std::string>& g, LlamaCppSettings& s) {
  for (const char* f :
       {"--device", "--split-mode", "--tensor-split", "--main-gpu", "--override-tensor"}) {
    s.per_device = s.per_device || g.contains(f);
  }
  if (const auto it = g.find("--device"); it != g.end()) {
    s.device_names = comma_list("--device", it->second);
    for (auto it2 = s.device_names.begin(); it2 != s.device_names.end(); ++it2) {
      const std::string& d = *it2;
      const bool cuda = d.size() > 4 && d.starts_with("CUDA") &&
                        d.find_first_not_of("0123456789", 4) == std::string::npos;
      if (!cuda || std::find(s.device_names.begin(), it2, d) != it2) {
        throw Error(
            fmt::format("--device: \"{}\" is not a new device name (CUDA0, CUDA1, ...)", d));
      }
    }
  }
  s.split_mode = choice(g, "--split-mode", "layer", {"none", "layer", "row"});
  if (const auto it = g.find("--main-gpu"); it != g.end()) {
    const std::string& v = it->second;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s.main_gpu);
    if (ec != std::errc() || end != v.data() + v.size()) {
      throw Error(fmt::format("--main-gpu: expected a device index (0, 1, ...), got \"{}\"", v));
    }
  }
  if (const auto it = g.find("--tensor-split"); it != g.end()) {
    for (const std::string& v : comma_list("--tensor-split", it->second)) {
      double x = 0;
      if (!parse_double(v, x) || !(x >= 0.0) || x > 1e30) {
        throw Error(fmt::format("--tensor-split: expected shares >= 0, got \"{}\"", v));
      }
      s.tensor_split.push_back(x);
    }
  }
  if (const auto it = g.find("--override-tensor"); it != g.end()) {
    for (const std::string& o : comma_list("--override-tensor", it->second)) {
      const std::size_t eq = o.find('=');  // the first '=', as parse_tensor_buffer_overrides
      if (eq == std::string::npos || eq + 1 == o.size()) {
        throw Error(fmt::format("--override-tensor: expected PATTERN=BUFT, got \"{}\"", o));
      }
      s.overrides.emplace_back(o.substr(0, eq), o.substr(eq + 1));
    }
  }
}

LlamaCppSettings llama_cpp_settings(const std::map<std::string, std::string>& g) {
  LlamaCppSettings s;
  s.ctx_size = count_of(g, "--ctx-size", 0);
  s.parallel = count_of(g, "--parallel", 1);
  s.n_gpu_layers = count_of(g, "--n-gpu-layers", 999);
  s.flash_attn = g.contains("--flash-attn");
  s.mla = g.contains("--mla");
  const auto type = [&](const char* flag) {
    const auto it = g.find(flag);
    return it == g.end() ? std::string("f16") : it->second;
  };
  if (const auto q = g.find("--quantization"); q != g.end()) s.quantization = q->second;
  s.cache_type_k = type("--cache-type-k");
  s.cache_type_v = type("--cache-type-v");
  s.batch_size = count_of(g, "--batch-size", 2048);
  s.ubatch_size = count_of(g, "--ubatch-size", 512);
  read_split_flags(g, s);
  return s;
}

// What every serve command reads before it estimates: the flags, the engine, the output and
// the model (a GGUF header's metadata when no --model or --config names one).
struct ServeInputs {
  std::map<std::string, std::string> given;
  ServeEngine engine = ServeEngine::vllm;
  std::string format;
  Unit unit = Unit::GiB;
  std::optional<GgufHeader> header;
  std::string gguf;
  ServeModel model;
};

ServeInputs read_inputs(std::map<std::string, std::string> g) {
  ServeInputs in;
  const std::string engine_name = choice(g, "--engine", "vllm", {"vllm", "llama.cpp"});
  in.engine = engine_name == "vllm" ? ServeEngine::vllm : ServeEngine::llama_cpp;
  check_engine(g, in.engine);
  in.format = choice(g, "--format", "table", {"table", "json", "markdown"});
  if (const auto it = g.find("--units"); it != g.end()) in.unit = parse_unit(it->second);
  const auto text = [&](const char* flag) {
    const auto it = g.find(flag);
    return it == g.end() ? std::string() : it->second;
  };
  in.gguf = text("--gguf");
  if (!in.gguf.empty() && g.contains("--quantization")) {
    throw Error("--quantization: give --gguf FILE or a --quantization file type, not both");
  }
  if (!in.gguf.empty()) in.header = read_gguf_header(in.gguf);
  const bool gguf_model = in.header && !g.contains("--model") && !g.contains("--config");
  in.model = gguf_model ? gguf_serve_model(*in.header, in.gguf)
                        : load_serve_model(text("--model"), text("--config"));
  in.given = std::move(g);
  return in;
}

// The plain text in Markdown: the table in a text block, as training's reports do.
std::string as_format(const std::string& format, const std::string& text) {
  return format == "markdown" ? "```text\n" + text + "```\n" : text;
}

// The llama.cpp estimate with the weights of a GGUF file's header where one is given.
LlamaCppEstimateFn llama_cpp_estimator(const ServeInputs& in) {
  return [&in](const LlamaCppSettings& s) {
    return in.header ? estimate_gguf(in.model, s, *in.header) : estimate_llama_cpp(in.model, s);
  };
}

ServeOutput estimate_output(const ServeInputs& in) {
  std::string gpu_label;
  ServeEstimate e;
  if (in.engine == ServeEngine::vllm) {
    const VllmSettings s = vllm_settings(in.given, total_memory(in.given, &gpu_label));
    e = estimate_vllm(in.model, s);
    if (s.enforce_eager) e.cuda_graphs_bytes = 0;
  } else {
    e = llama_cpp_estimator(in)(llama_cpp_settings(in.given));
  }
  return {in.format == "json" ? render_serve_json(e)
                              : as_format(in.format, render_serve_table(e, gpu_label, in.unit)),
          e.fits ? 0 : 1};
}

// The flag `--fit` searches on each engine, and the one it keeps as given.
std::string_view searched_flag(ServeEngine e, ServeFitTarget t) {
  if (e == ServeEngine::vllm)
    return t == ServeFitTarget::context ? "--max-model-len" : "--max-num-seqs";
  return t == ServeFitTarget::context ? "--ctx-size" : "--parallel";
}

// A value the search sets is not given as well; --max bounds the search instead.
ServeFitTarget fit_target(const ServeInputs& in) {
  const std::string what = choice(in.given, "--fit", "", {"context", "concurrency"});
  const ServeFitTarget t =
      what == "context" ? ServeFitTarget::context : ServeFitTarget::concurrency;
  const std::string flag(searched_flag(in.engine, t));
  if (in.given.contains(flag)) {
    throw Error(
        fmt::format("{}: --fit {} searches it (give --max N to bound the search)", flag, what));
  }
  return t;
}

constexpr u64 kFitSearchMax = 1ULL << 20;  // a context search's bound without the model's

// The largest context the search tries: --max, else the model's max_position_embeddings (vLLM
// refuses a longer max_model_len: config/model.py, _get_and_verify_max_len).
void context_limit(const ServeInputs& in, ServeFit& fit) {
  fit.limit = count_of(in.given, "--max", 0);
  if (fit.limit == 0) {
    fit.limit_is_model = in.model.max_positions > 0;
    fit.limit = fit.limit_is_model ? in.model.max_positions : kFitSearchMax;
  }
}

// vLLM's rows: the checkpoint's weights and, for an unquantised one, --quantization fp8; KV in
// the model dtype (auto) and fp8; each the given one alone when the flag is given.
void vllm_fit_rows(const ServeInputs& in, ServeFit& fit) {
  const auto& g = in.given;
  const VllmSettings base = vllm_settings(g, fit.total_memory);
  fit.devices = base.tensor_parallel_size;
  if (fit.target == ServeFitTarget::context) {
    context_limit(in, fit);
    fit.held_fixed = base.max_num_seqs;
  } else {
    // SchedulerConfig.verify_max_model_len (vllm/config/scheduler.py, read at commit 01230b40):
    // max_num_batched_tokens must be >= max_num_seqs.
    fit.limit = count_of(g, "--max", base.max_num_batched_tokens);
    if (fit.limit > base.max_num_batched_tokens) {
      throw Error(
          fmt::format("--max: vLLM refuses a max_num_seqs above max_num_batched_tokens ({})",
                      base.max_num_batched_tokens));
    }
    fit.held_fixed = base.max_model_len > 0 ? base.max_model_len : in.model.max_positions;
  }
  const bool checkpoint = in.model.spec.checkpoint_quant.has_value();
  std::vector<std::string> quants = {base.quantization};
  if (!g.contains("--quantization") && !checkpoint) quants.emplace_back("fp8");
  std::vector<std::string> kvs = {base.kv_cache_dtype};
  if (!g.contains("--kv-cache-dtype")) kvs.emplace_back("fp8");
  const std::string own = checkpoint ? in.model.spec.checkpoint_quant->method
                                     : std::string(dtype_name(base.dtype.value_or(in.model.dtype)));
  for (const std::string& q : quants) {
    for (const std::string& kv : kvs) {
      VllmSettings s = base;
      s.quantization = q;
      s.kv_cache_dtype = kv;
      ServeFitRow row = fit_serve_row(vllm_probe(in.model, s, fit.target), fit.limit);
      row.weights = q.empty() ? own : q;
      row.kv_cache = kv;
      if (!q.empty()) row.flags.push_back("--quantization " + q);
      if (kv != "auto") row.flags.push_back("--kv-cache-dtype " + kv);
      fit.rows.push_back(std::move(row));
    }
  }
}

// llama.cpp's weight formats compared when neither --quantization nor --gguf names one.
constexpr std::array<std::string_view, 5> kFitGgufTypes = {"F16", "Q8_0", "Q6_K", "Q5_K_M",
                                                           "Q4_K_M"};

// llama.cpp's limits: n_ctx is a uint32_t (llama_context_params), so --parallel n slots of
// `per_request` cells stop at (2^32 - 1) / per_request; a context at the model's positions.
void llama_cpp_limits(const ServeInputs& in, const LlamaCppSettings& base, ServeFit& fit) {
  if (fit.target == ServeFitTarget::context) {
    context_limit(in, fit);
    fit.held_fixed = base.parallel;
    return;
  }
  fit.held_fixed = base.ctx_size > 0 ? base.ctx_size : in.model.max_positions;
  if (fit.held_fixed == 0) throw Error("--ctx-size: the config has no max_position_embeddings");
  const u64 cells = 0xFFFFFFFFULL / fit.held_fixed;
  fit.limit = std::min(count_of(in.given, "--max", cells), cells);
}

// llama.cpp's rows: GGUF file types (or the one given) by KV-cache types f16, q8_0 and q4_0
// for K and V alike (or the ones given); a quantised V cache needs flash attention, which its
// row turns on.
void llama_cpp_fit_rows(const ServeInputs& in, ServeFit& fit) {
  const auto& g = in.given;
  const LlamaCppSettings base = llama_cpp_settings(g);
  fit.devices = std::max<std::size_t>(1, base.device_names.size());
  llama_cpp_limits(in, base, fit);
  std::vector<std::string> weights;
  if (in.header) {
    weights.push_back(in.gguf.substr(in.gguf.find_last_of('/') + 1));
  } else if (!base.quantization.empty()) {
    weights.push_back(base.quantization);
  } else {
    weights.assign(kFitGgufTypes.begin(), kFitGgufTypes.end());
  }
  std::vector<std::pair<std::string, std::string>> kvs;
  if (g.contains("--cache-type-k") || g.contains("--cache-type-v")) {
    kvs.emplace_back(base.cache_type_k, base.cache_type_v);
  } else {
    for (const char* t : {"f16", "q8_0", "q4_0"}) kvs.emplace_back(t, t);
  }
  const LlamaCppEstimateFn estimate = llama_cpp_estimator(in);
  for (const std::string& w : weights) {
    for (const auto& [k, v] : kvs) {
      LlamaCppSettings s = base;
      if (!in.header) s.quantization = w;
      s.cache_type_k = k;
      s.cache_type_v = v;
      std::vector<std::string> flags;
      if (!in.header && base.quantization.empty()) flags.push_back("--quantization " + w);
      if (!g.contains("--cache-type-k")) flags.push_back("--cache-type-k " + k);
      if (!g.contains("--cache-type-v")) flags.push_back("--cache-type-v " + v);
      if (v != "f16" && v != "f32" && v != "bf16" && !s.flash_attn) {
        s.flash_attn = true;
        flags.emplace_back("--flash-attn");
      }
      ServeFitRow row = fit_serve_row(
          llama_cpp_probe(estimate, s, fit.target, fit.held_fixed, fit.total_memory), fit.limit);
      row.flags = std::move(flags);
      row.weights = w;
      row.kv_cache = k == v ? k : fmt::format("{}/{}", k, v);
      fit.rows.push_back(std::move(row));
    }
  }
}

ServeOutput fit_output(const ServeInputs& in) {
  ServeFit fit;
  fit.engine = in.engine;
  fit.target = fit_target(in);
  fit.model = in.model.spec.name;
  fit.total_memory = total_memory(in.given, &fit.gpu);
  if (in.engine == ServeEngine::vllm) {
    vllm_fit_rows(in, fit);
  } else {
    llama_cpp_fit_rows(in, fit);
  }
  const bool any = std::any_of(fit.rows.begin(), fit.rows.end(),
                               [](const ServeFitRow& r) { return r.best.has_value(); });
  return {in.format == "json" ? render_serve_fit_json(fit)
                              : as_format(in.format, render_serve_fit_table(fit, in.unit)),
          any ? 0 : 1};
}

}  // namespace

ServeOutput serve_command(std::span<const std::string> args) {
  auto g = read_flags(args);
  if (g.contains("--help") || g.contains("-h")) return {help_text(), 0};
  if (g.contains("--max") && !g.contains("--fit")) {
    throw Error("--max: bounds the search of --fit (give --fit context or --fit concurrency)");
  }
  const ServeInputs in = read_inputs(std::move(g));
  return in.given.contains("--fit") ? fit_output(in) : estimate_output(in);
}

}  // namespace memest
