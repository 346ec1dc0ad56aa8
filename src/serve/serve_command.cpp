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
constexpr std::array<ServeFlag, 32> kFlags = {{
    {"--model", For::both, "NAME", "Model preset, Hub id (local cache) or model folder"},
    {"--config", For::both, "PATH", "A Hugging Face config.json"},
    {"--engine", For::both, "NAME", "vllm or llama.cpp (default vllm)"},
    {"--gpu", For::both, "NAME", "GPU preset: its memory is the total (default h100-80gb)"},
    {"--gpu-memory", For::both, "SIZE",
     "Total device memory as torch.cuda.mem_get_info reports it (overrides --gpu)"},
    {"--format", For::both, "FORMAT", "table or json (default table)"},
    {"--units", For::both, "UNIT", "Units of the table (default GiB)"},
    {"--max-model-len", For::vllm, "N", "Longest request in tokens (default: the model's)"},
    {"--max-num-seqs", For::vllm, "N", "Requests per step (default 1024 on >= 70 GiB, else 256)"},
    {"--max-num-batched-tokens", For::vllm, "N",
     "Tokens per step (default 8192 on >= 70 GiB, else 2048)"},
    {"--gpu-memory-utilization", For::vllm, "F", "Fraction of the total vLLM may use (0.9)"},
    {"--kv-cache-dtype", For::vllm, "NAME", "auto, fp8, fp8_e4m3 or fp8_e5m2 (default auto)"},
    {"--dtype", For::vllm, "NAME", "auto, bfloat16, float16 (default auto: the config's)"},
    {"--quantization", For::both, "NAME",
     "vllm: fp8 or compressed-tensors (FP8 weights); llama.cpp: a GGUF file type (Q4_K_M, ...)"},
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
  s.quantization = choice(g, "--quantization", "", {"fp8", "compressed-tensors"});
  const std::string dtype =
      choice(g, "--dtype", "auto", {"auto", "bfloat16", "bf16", "float16", "fp16", "half"});
  if (dtype != "auto") s.dtype = dtype.starts_with("b") ? Dtype::bf16 : Dtype::fp16;
  s.enforce_eager = g.contains("--enforce-eager");
  s.kv_cache_memory = size_of(g, "--kv-cache-memory");
  s.non_torch_memory = size_of(g, "--non-torch-memory");
  return s;
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
  return s;
}

}  // namespace

ServeOutput serve_command(std::span<const std::string> args) {
  const auto g = read_flags(args);
  if (g.contains("--help") || g.contains("-h")) return {help_text(), 0};
  const std::string engine_name = choice(g, "--engine", "vllm", {"vllm", "llama.cpp"});
  const ServeEngine engine = engine_name == "vllm" ? ServeEngine::vllm : ServeEngine::llama_cpp;
  check_engine(g, engine);
  const std::string format = choice(g, "--format", "table", {"table", "json"});
  Unit unit = Unit::GiB;
  if (const auto it = g.find("--units"); it != g.end()) unit = parse_unit(it->second);
  const auto text = [&](const char* flag) {
    const auto it = g.find(flag);
    return it == g.end() ? std::string() : it->second;
  };
  const std::string gguf = text("--gguf");
  if (!gguf.empty() && g.contains("--quantization")) {
    throw Error("--quantization: give --gguf FILE or a --quantization file type, not both");
  }
  const std::optional<GgufHeader> header =
      gguf.empty() ? std::nullopt : std::optional(read_gguf_header(gguf));
  const bool gguf_model = header && !g.contains("--model") && !g.contains("--config");
  const ServeModel model = gguf_model ? gguf_serve_model(*header, gguf)
                                      : load_serve_model(text("--model"), text("--config"));
  std::string gpu_label;
  ServeEstimate e;
  if (engine == ServeEngine::vllm) {
    const VllmSettings s = vllm_settings(g, total_memory(g, &gpu_label));
    e = estimate_vllm(model, s);
    if (s.enforce_eager) e.cuda_graphs_bytes = 0;
  } else {
    const LlamaCppSettings s = llama_cpp_settings(g);
    e = estimate_llama_cpp(model, s);
    if (header) add_gguf_weights(e, *header, s.n_gpu_layers, model.spec.arch->num_layers);
  }
  return {format == "json" ? render_serve_json(e) : render_serve_table(e, gpu_label, unit),
          e.fits ? 0 : 1};
}

}  // namespace memest
