// `memest serve`: the serve flags (the rows of serve_options.cpp, each engine's own flag names,
// so a launch line can be pasted) and a serve run config under them, read into the engine's
// settings, estimated and rendered. The serve options have their own table rather than rows of
// the run-option table: they describe an inference server, not a training run, and no training
// flag applies here.
#include "base/numbers.hpp"
#include "serve/gguf_header.hpp"
#include "serve/serve_render.hpp"

#include <memest/error.hpp>
#include <memest/hardware.hpp>
#include <memest/serve.hpp>
#include <memest/serve_config.hpp>
#include <memest/serve_fit.hpp>
#include <memest/serve_options.hpp>
#include <memest/suggest.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <functional>

namespace memest {
namespace {

const ServeOptionInfo& serve_row(std::string_view flag) { return *find_serve_option(flag); }

std::string help_text() {
  std::string s =
      "memest serve: the memory an inference engine allocates per device for a model\n"
      "Usage: memest serve --model NAME [--engine vllm|llama.cpp|sglang|hf] [engine flags]\n\n";
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (f.flag == "-h") continue;
    s += fmt::format("  {:<32} {}{}\n", fmt::format("{} {}", f.flag, f.type_name),
                     serve_engines_prefix(f), f.help);
  }
  return s + "\nUnits: GB = 10^9 bytes, GiB = 2^30 bytes. See docs/serving.md.\n";
}

// A switch given a value (`--enforce-eager=false`), as the training flags and a run config's
// true and false read it: "" for on, "false" for off (dropped once laid over a file).
std::string switch_word(std::string_view flag, std::string_view word) {
  if (word == "true" || word == "1" || word == "on" || word == "yes") return "";
  if (word == "false" || word == "0" || word == "off" || word == "no") return "false";
  throw Error(fmt::format(
      "{}: \"{}\" is not a switch's value (expected true or false, or no value)", flag, word));
}

// The switches given false gone, so that presence means on everywhere after.
ServeValues without_switches_off(ServeValues g) {
  std::erase_if(g, [](const auto& entry) {
    return serve_row(entry.first).type_name.empty() && entry.second.text == "false";
  });
  return g;
}

// The flags given, by name; `--name=value` and `--name value` alike.
ServeValues read_flags(std::span<const std::string> args) {
  ServeValues given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos && name.starts_with("--");
    if (inline_value) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    const ServeOptionInfo* f = find_serve_option(name);
    if (!f) {
      std::vector<std::string_view> names;
      for (const ServeOptionInfo& g : serve_option_table()) names.push_back(g.flag);
      throw Error(fmt::format("serve: unknown flag \"{}\"{} (see memest serve --help)", name,
                              did_you_mean(name, names)));
    }
    if (given.contains(name)) throw Error(fmt::format("{}: given twice", name));
    if (f->type_name.empty() && inline_value) value = switch_word(name, value);
    if (!f->type_name.empty() && !inline_value) {
      if (i + 1 >= args.size()) {
        throw Error(fmt::format("{}: needs a value ({})", name, f->type_name));
      }
      value = args[++i];
    }
    given[name] = ServeValue{value, name};
  }
  return given;
}

// The flags laid over a serve run config (--file): a flag replaces the file's value, and the
// file's other spelling of it (tp for --tensor-parallel-size) or its other way of naming the
// model (config for --model).
ServeValues with_file(ServeValues flags) {
  const auto file = flags.find("--file");
  if (file == flags.end()) return flags;
  ServeValues out = load_serve_config(file->second.text);
  const auto drop = [&](std::string_view flag) {
    if (const auto it = out.find(flag); it != out.end()) out.erase(it);
  };
  for (const auto& [flag, value] : flags) {
    // Every spelling of the flag (--tensor-parallel-size, --tp, --tp-size) gives way.
    const ServeOptionInfo& f = serve_row(flag);
    const std::string_view root = f.alias_of.empty() ? std::string_view(f.flag) : f.alias_of;
    for (const ServeOptionInfo& g : serve_option_table()) {
      const std::string_view own = g.alias_of.empty() ? std::string_view(g.flag) : g.alias_of;
      if (own == root && g.flag != flag) drop(g.flag);
    }
    if (flag == "--model" || flag == "--config") {
      drop("--model");
      drop("--config");
    }
  }
  for (auto& [flag, value] : flags) out[flag] = std::move(value);
  return out;
}

// A count; absent: `fallback`, else the row's constant default, else 0.
u64 count_of(const ServeValues& g, std::string_view flag, std::optional<u64> fallback = {}) {
  const auto it = g.find(flag);
  if (it == g.end()) {
    if (fallback) return *fallback;
    const std::string_view d = serve_row(flag).fallback.value;
    return d.empty() ? 0 : parse_count(d);
  }
  try {
    return parse_count(it->second.text);
  } catch (const Error& e) {
    rethrow_with_context(e, it->second.where);
  }
}

std::optional<u64> size_of(const ServeValues& g, std::string_view flag) {
  const auto it = g.find(flag);
  if (it == g.end()) return std::nullopt;
  const std::string& v = it->second.text;
  u64 n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc() && end == v.data() + v.size()) return n;  // vLLM's bare byte count
  try {
    return parse_bytes(v);
  } catch (const Error& e) {
    rethrow_with_context(e, it->second.where);
  }
}

// One of the names the option takes on `engine`; absent: its default.
std::string choice(const ServeValues& g, std::string_view flag,
                   ServeEngine engine = ServeEngine::vllm) {
  const ServeOptionInfo& f = serve_row(flag);
  const auto it = g.find(flag);
  if (it == g.end()) return std::string(f.fallback.value);
  const auto accepted = serve_choices(f, engine);
  if (std::find(accepted.begin(), accepted.end(), it->second.text) == accepted.end()) {
    throw Error(fmt::format("{}: \"{}\" is not offered (expected one of: {})", it->second.where,
                            it->second.text, fmt::join(accepted, ", ")));
  }
  return it->second.text;
}

double fraction_of(const ServeValues& g, std::string_view flag) {
  const auto it = g.find(flag);
  double v = 0;
  if (it == g.end()) {
    parse_double(serve_row(flag).fallback.value, v);
    return v;
  }
  const std::string& t = it->second.text;
  if (!parse_double(t, v) || !(v > 0.0) || v > 1.0) {
    throw Error(fmt::format("{}: expected a fraction in (0, 1], got \"{}\"", it->second.where, t));
  }
  return v;
}

// The text of a path or a name; empty when not given.
std::string given_text(const ServeValues& g, std::string_view flag) {
  const auto it = g.find(flag);
  return it == g.end() ? std::string() : it->second.text;
}

// The engine's flags given to another engine are refused, never ignored.
void check_engine(const ServeValues& g, ServeEngine engine) {
  for (const auto& [name, value] : g) {
    const ServeOptionInfo& f = serve_row(name);
    if (serve_option_applies(f, engine)) continue;
    throw Error(fmt::format("{}: a {} flag, not used by --engine {}", value.where,
                            serve_engines_words(f), serve_engine_name(engine)));
  }
}

// The --gpu preset (default h100-80gb); --gpu-memory only overrides its total.
const Gpu& serve_gpu(const ServeValues& g) {
  const auto it = g.find("--gpu");
  return find_gpu(it == g.end() ? serve_row("--gpu").fallback.value : it->second.text);
}

u64 total_memory(const ServeValues& g, std::string* gpu_label) {
  if (auto m = size_of(g, "--gpu-memory")) {
    *gpu_label = fmt::format("{} total", format_bytes(*m, Unit::GiB));
    return *m;
  }
  const Gpu& gpu = serve_gpu(g);
  *gpu_label = std::string(gpu.name);
  return gpu.capacity;
}

VllmSettings vllm_settings(const ServeValues& g, u64 total) {
  VllmSettings s;
  s.total_memory = total;
  // vLLM's engine/arg_utils.py (get_batch_defaults, v0.19.0): the OpenAI server's defaults on
  // devices of >= 70 GiB (the A100s excepted) and on the others.
  const bool large = total >= 70 * (1ULL << 30);
  s.gpu_memory_utilization = fraction_of(g, "--gpu-memory-utilization");
  s.max_model_len = count_of(g, "--max-model-len");
  s.max_num_seqs = count_of(g, "--max-num-seqs", large ? 1024 : 256);
  s.max_num_batched_tokens = count_of(g, "--max-num-batched-tokens", large ? 8192 : 2048);
  if (g.contains("--tp") && g.contains("--tensor-parallel-size")) {
    throw Error("--tp: give --tp or --tensor-parallel-size, not both");
  }
  s.tensor_parallel_size = count_of(g, g.contains("--tp") ? "--tp" : "--tensor-parallel-size");
  s.block_size = count_of(g, "--block-size");
  s.kv_cache_dtype = choice(g, "--kv-cache-dtype");
  s.quantization = choice(g, "--quantization");
  const std::string dtype = choice(g, "--dtype");
  if (dtype != "auto") s.dtype = dtype.starts_with("b") ? Dtype::bf16 : Dtype::fp16;
  s.enforce_eager = g.contains("--enforce-eager");
  s.kv_cache_memory = size_of(g, "--kv-cache-memory");
  s.non_torch_memory = size_of(g, "--non-torch-memory");
  const Gpu& gpu = serve_gpu(g);
  s.compute_units = gpu.sms;
  s.sm = gpu.sm;
  return s;
}

// A count when given; absent otherwise.
std::optional<u64> given_count(const ServeValues& g, std::string_view flag) {
  if (!g.contains(flag)) return std::nullopt;
  return count_of(g, flag);
}

// The tensor-parallel size under its one spelling given (vLLM's two, SGLang's three).
u64 tp_of(const ServeValues& g) {
  std::vector<std::string_view> given;
  for (std::string_view f : {"--tensor-parallel-size", "--tp", "--tp-size"}) {
    if (g.contains(f)) given.push_back(f);
  }
  if (given.size() > 1) {
    throw Error(fmt::format("{}: give one of {}, not both", given.back(), fmt::join(given, ", ")));
  }
  return count_of(g, given.empty() ? "--tensor-parallel-size" : given.front());
}

// SGLang's settings (server_args.py's flags); the defaults that depend on the GPU stay absent
// for estimate_sglang to derive.
SglangSettings sglang_settings(const ServeValues& g, u64 total) {
  SglangSettings s;
  s.total_memory = total;
  if (g.contains("--mem-fraction-static")) {
    s.mem_fraction_static = fraction_of(g, "--mem-fraction-static");
  }
  s.context_length = count_of(g, "--context-length");
  s.max_running_requests = given_count(g, "--max-running-requests");
  s.max_total_tokens = given_count(g, "--max-total-tokens");
  s.chunked_prefill_size = given_count(g, "--chunked-prefill-size");
  s.cuda_graph_max_bs = given_count(g, "--cuda-graph-max-bs");
  s.page_size = count_of(g, "--page-size");
  s.tp_size = tp_of(g);
  s.kv_cache_dtype = choice(g, "--kv-cache-dtype", ServeEngine::sglang);
  s.quantization = choice(g, "--quantization", ServeEngine::sglang);
  const std::string dtype = choice(g, "--dtype", ServeEngine::sglang);
  if (dtype != "auto") s.dtype = dtype == "bfloat16" ? Dtype::bf16 : Dtype::fp16;
  s.disable_cuda_graph = g.contains("--disable-cuda-graph");
  return s;
}

// One of llama.cpp's names (ggml's cache types, the GGUF file types), refused in the words of
// the estimate's own check; absent: the default.
std::string llama_cpp_name(const ServeValues& g, std::string_view flag, std::string_view what) {
  const ServeOptionInfo& f = serve_row(flag);
  const auto it = g.find(flag);
  if (it == g.end()) return std::string(f.fallback.value);
  const auto names = serve_choices(f, ServeEngine::llama_cpp);
  if (std::find(names.begin(), names.end(), it->second.text) == names.end()) {
    throw Error(fmt::format("{}: unknown {} \"{}\" (expected one of: {})", it->second.where, what,
                            it->second.text, fmt::join(names, ", ")));
  }
  return it->second.text;
}

// A comma-separated list, each item non-empty; `where` names the flag or run-config key.
std::vector<std::string> comma_list(const ServeValue& v) {
  std::vector<std::string> items;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = v.text.find(',', at);
    items.push_back(v.text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (items.back().empty()) {
      throw Error(fmt::format("{}: an empty item in \"{}\"", v.where, v.text));
    }
    if (comma == std::string::npos) return items;
    at = comma + 1;
  }
}

// --device: CUDA0, CUDA1, ..., each named once.
std::vector<std::string> device_names_of(const ServeValue& v) {
  std::vector<std::string> names = comma_list(v);
  for (auto it = names.begin(); it != names.end(); ++it) {
    const std::string& d = *it;
    const bool cuda = d.size() > 4 && d.starts_with("CUDA") &&
                      d.find_first_not_of("0123456789", 4) == std::string::npos;
    if (!cuda || std::find(names.begin(), it, d) != it) {
      throw Error(
          fmt::format("{}: \"{}\" is not a new device name (CUDA0, CUDA1, ...)", v.where, d));
    }
  }
  return names;
}

// --tensor-split: each device's share, a number >= 0.
std::vector<double> shares_of(const ServeValue& v) {
  std::vector<double> shares;
  for (const std::string& item : comma_list(v)) {
    double x = 0;
    if (!parse_double(item, x) || !(x >= 0.0) || x > 1e30) {
      throw Error(fmt::format("{}: expected shares >= 0, got \"{}\"", v.where, item));
    }
    shares.push_back(x);
  }
  return shares;
}

// A list of PATTERN=VALUE pairs (--override-tensor, --custom-q), split at each item's first '='
// as llama.cpp's parse_tensor_buffer_overrides and ik_llama.cpp's parse_custom_quants do.
std::vector<std::pair<std::string, std::string>> pairs_of(const ServeValues& g, const char* flag,
                                                          std::string_view form) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto it = g.find(flag);
  if (it == g.end()) return out;
  for (const std::string& o : comma_list(it->second)) {
    const std::size_t eq = o.find('=');
    if (eq == std::string::npos || eq + 1 == o.size()) {
      throw Error(fmt::format("{}: expected {}, got \"{}\"", it->second.where, form, o));
    }
    out.emplace_back(o.substr(0, eq), o.substr(eq + 1));
  }
  return out;
}

// llama.cpp's multi-GPU flags (common/arg.cpp): --device names, --split-mode, --tensor-split's
// shares, --main-gpu, and --override-tensor's PATTERN=BUFT pairs.
void read_split_flags(const ServeValues& g, LlamaCppSettings& s) {
  for (const char* f :
       {"--device", "--split-mode", "--tensor-split", "--main-gpu", "--override-tensor"}) {
    s.per_device = s.per_device || g.contains(f);
  }
  if (const auto it = g.find("--device"); it != g.end())
    s.device_names = device_names_of(it->second);
  s.split_mode = choice(g, "--split-mode", ServeEngine::llama_cpp);
  if (const auto it = g.find("--main-gpu"); it != g.end()) {
    const std::string& v = it->second.text;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s.main_gpu);
    if (ec != std::errc() || end != v.data() + v.size()) {
      throw Error(
          fmt::format("{}: expected a device index (0, 1, ...), got \"{}\"", it->second.where, v));
    }
  }
  if (const auto it = g.find("--tensor-split"); it != g.end())
    s.tensor_split = shares_of(it->second);
  s.overrides = pairs_of(g, "--override-tensor", "PATTERN=BUFT");
}

LlamaCppSettings llama_cpp_settings(const ServeValues& g) {
  LlamaCppSettings s;
  s.batch_size = count_of(g, "--batch-size", 2048);
  s.ctx_size = count_of(g, "--ctx-size");
  s.parallel = count_of(g, "--parallel");
  s.n_gpu_layers = count_of(g, "--n-gpu-layers", 999);
  s.flash_attn = g.contains("--flash-attn");
  s.mla = g.contains("--mla");
  s.fused_moe = g.contains("--fused-moe");
  s.attn_max_batch = count_of(g, "--attention-max-batch");
  s.quantization = llama_cpp_name(g, "--quantization", "GGUF file type");
  s.quantizer = choice(g, "--quantizer", ServeEngine::llama_cpp);
  s.custom_q = pairs_of(g, "--custom-q", "REGEX=TYPE");
  s.cache_type_k = llama_cpp_name(g, "--cache-type-k", "cache type");
  s.cache_type_v = llama_cpp_name(g, "--cache-type-v", "cache type");
  s.ubatch_size = count_of(g, "--ubatch-size");
  s.sched_copies = count_of(g, "--sched-copies");
  read_split_flags(g, s);
  return s;
}

// transformers' generate() settings; --input-len is --prompt-len's other name.
HfSettings hf_settings(const ServeValues& g, u64 total) {
  HfSettings s;
  s.total_memory = total;
  if (g.contains("--input-len") && g.contains("--prompt-len")) {
    throw Error("--input-len: give --input-len or --prompt-len, not both");
  }
  s.batch_size = count_of(g, "--batch-size", 1);
  s.prompt_len = count_of(g, g.contains("--input-len") ? "--input-len" : "--prompt-len");
  s.max_new_tokens = count_of(g, "--max-new-tokens");
  const std::string dtype = choice(g, "--dtype", ServeEngine::hf);
  if (dtype != "auto") {
    s.dtype = dtype == "float32" ? Dtype::fp32 : dtype == "float16" ? Dtype::fp16 : Dtype::bf16;
  }
  s.quantization = choice(g, "--quantization", ServeEngine::hf);
  s.attn_implementation = choice(g, "--attn-implementation", ServeEngine::hf);
  s.cache_implementation = choice(g, "--cache-implementation", ServeEngine::hf);
  return s;
}

// What every serve command reads before it estimates: the flags, the engine, the output and
// the model (a GGUF header's metadata when no --model or --config names one).
struct ServeInputs {
  ServeValues given;
  ServeEngine engine = ServeEngine::vllm;
  std::string format;
  Unit unit = Unit::GiB;
  std::optional<GgufHeader> header;
  std::string gguf;
  ServeModel model;
  std::string plot;  // --plot FILE.svg
};

ServeInputs read_inputs(ServeValues g) {
  ServeInputs in;
  const std::string engine_name = choice(g, "--engine");
  const auto names = serve_engine_names();
  in.engine =
      static_cast<ServeEngine>(std::find(names.begin(), names.end(), engine_name) - names.begin());
  check_engine(g, in.engine);
  in.format = choice(g, "--format");
  in.unit = parse_unit(g.contains("--units") ? g.at("--units").text
                                             : serve_row("--units").fallback.value);
  const auto text = [&](const char* flag) { return given_text(g, flag); };
  in.gguf = text("--gguf");
  if (!in.gguf.empty() && g.contains("--quantization")) {
    throw Error("--quantization: give --gguf FILE or a --quantization file type, not both");
  }
  if (g.contains("--custom-q") && !g.contains("--quantization")) {
    throw Error(fmt::format(
        "{}: the rules refine a --quantization file type's; give one (a --gguf file has its own "
        "types)",
        g.at("--custom-q").where));
  }
  if (g.contains("--quantizer") && !g.contains("--quantization")) {
    throw Error(fmt::format(
        "{}: the rules of the quantizer type a --quantization file type; give one (a --gguf "
        "file has its own types)",
        g.at("--quantizer").where));
  }
  if (!in.gguf.empty()) in.header = read_gguf_header(in.gguf);
  const bool gguf_model = in.header && !g.contains("--model") && !g.contains("--config");
  in.model = gguf_model ? gguf_serve_model(*in.header, in.gguf)
                        : load_serve_model(text("--model"), text("--config"));
  in.plot = text("--plot");
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

// A plain run's picture: llama.cpp's devices when it shows them, else the one device's parts.
std::string estimate_svg(const ServeEstimate& e, const std::string& gpu, u64 total, Unit unit) {
  ServeHeldBars bars;
  if (e.devices_shown) {
    bars = serve_held_devices(e);
  } else {
    bars.emplace_back(
        e.devices == 1 ? std::string("the device") : fmt::format("each of {} devices", e.devices),
        serve_held(e));
  }
  return render_serve_svg(e, bars, gpu, total, unit);
}

ServeOutput estimate_output(const ServeInputs& in) {
  // llama.cpp reads the device only for the picture (a plain run's table has no budget).
  std::string gpu_label;
  const bool vllm = in.engine == ServeEngine::vllm;
  const u64 total =
      vllm || in.engine == ServeEngine::sglang || in.engine == ServeEngine::hf || !in.plot.empty()
          ? total_memory(in.given, &gpu_label)
          : 0;
  ServeEstimate e;
  if (vllm) {
    e = estimate_vllm(in.model, vllm_settings(in.given, total));
  } else if (in.engine == ServeEngine::sglang) {
    e = estimate_sglang(in.model, sglang_settings(in.given, total));
  } else if (in.engine == ServeEngine::hf) {
    e = estimate_hf(in.model, hf_settings(in.given, total));
  } else {
    e = llama_cpp_estimator(in)(llama_cpp_settings(in.given));
  }
  ServeOutput out{in.format == "json"
                      ? render_serve_json(e, serve_config_of(in.given))
                      : as_format(in.format, render_serve_table(e, gpu_label, in.unit)),
                  e.fits ? 0 : 1};
  if (!in.plot.empty()) {
    out.plot_path = in.plot;
    out.plot = estimate_svg(e, gpu_label, total, in.unit);
  }
  return out;
}

// A value the search sets is not given as well; --max bounds the search instead.
ServeFitTarget fit_target(const ServeInputs& in) {
  const std::string what = choice(in.given, "--fit");
  const ServeFitTarget t =
      what == "context" ? ServeFitTarget::context : ServeFitTarget::concurrency;
  const std::string flag(serve_fit_flag(in.engine, t));
  if (in.given.contains(flag) || (flag == "--prompt-len" && in.given.contains("--input-len"))) {
    throw Error(
        fmt::format("{}: --fit {} searches it (give --max N to bound the search)", flag, what));
  }
  return t;
}

constexpr u64 kFitSearchMax = 1ULL << 20;  // a context search's bound without the model's

// The largest context the search tries: --max, else the model's max_position_embeddings (vLLM
// refuses a longer max_model_len: config/model.py, _get_and_verify_max_len).
void context_limit(const ServeInputs& in, ServeFit& fit) {
  fit.limit = count_of(in.given, "--max");
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
  fit.usable_memory = vllm_budget(base);
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

// SGLang's rows: the checkpoint's weights and, for an unquantised one, --quantization fp8; KV in
// the model dtype (auto) and fp8_e4m3; each the given one alone when the flag is given. The
// concurrency searched is bounded by --max, else by the pool's tokens over the context.
void sglang_fit_rows(const ServeInputs& in, ServeFit& fit) {
  const auto& g = in.given;
  const SglangSettings base = sglang_settings(g, fit.total_memory);
  fit.devices = base.tp_size;
  fit.usable_memory = sglang_budget(base);
  if (fit.target == ServeFitTarget::context) {
    context_limit(in, fit);
    fit.held_fixed = base.max_running_requests.value_or(0);
  } else {
    fit.held_fixed = base.context_length > 0 ? base.context_length : in.model.max_positions;
    fit.limit = count_of(g, "--max", kFitSearchMax);
  }
  const bool checkpoint = in.model.spec.checkpoint_quant.has_value();
  std::vector<std::string> quants = {base.quantization};
  if (!g.contains("--quantization") && !checkpoint) quants.emplace_back("fp8");
  std::vector<std::string> kvs = {base.kv_cache_dtype};
  if (!g.contains("--kv-cache-dtype")) kvs.emplace_back("fp8_e4m3");
  const std::string own = checkpoint ? in.model.spec.checkpoint_quant->method
                                     : std::string(dtype_name(base.dtype.value_or(in.model.dtype)));
  for (const std::string& q : quants) {
    for (const std::string& kv : kvs) {
      SglangSettings s = base;
      s.quantization = q;
      s.kv_cache_dtype = kv;
      ServeFitRow row = fit_serve_row(sglang_probe(in.model, s, fit.target), fit.limit);
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
  fit.usable_memory = fit.total_memory;
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

// transformers' rows: the weights in torch_dtype and, unless --quantization names one,
// bitsandbytes 8-bit and 4-bit; the cache dynamic, static and offloaded unless
// --cache-implementation names one. A context is --prompt-len at the given --max-new-tokens and
// --batch-size (up to max_position_embeddings - max_new_tokens); concurrency is --batch-size
// at both lengths.
void hf_fit_rows(const ServeInputs& in, ServeFit& fit) {
  const auto& g = in.given;
  const HfSettings base = hf_settings(g, fit.total_memory);
  fit.usable_memory = fit.total_memory;
  if (base.max_new_tokens == 0) throw Error("--max-new-tokens: give the tokens to generate");
  if (fit.target == ServeFitTarget::context) {
    fit.limit = count_of(g, "--max");
    if (fit.limit == 0) {
      fit.limit_is_model = in.model.max_positions > base.max_new_tokens;
      fit.limit = fit.limit_is_model ? in.model.max_positions - base.max_new_tokens : kFitSearchMax;
    }
    fit.held_fixed = base.max_new_tokens;
    fit.held_extra = base.batch_size;
  } else {
    if (base.prompt_len == 0) {
      throw Error("--prompt-len: give the prompt's tokens (input_ids' length)");
    }
    fit.limit = count_of(g, "--max", kFitSearchMax);
    fit.held_fixed = base.prompt_len;
    fit.held_extra = base.max_new_tokens;
  }
  std::vector<std::string> quants = {base.quantization};
  if (!g.contains("--quantization")) quants = {"", "bnb-8bit", "bnb-4bit"};
  std::vector<std::string> caches = {base.cache_implementation};
  if (!g.contains("--cache-implementation")) caches = {"dynamic", "static", "offloaded"};
  const Dtype dtype = base.dtype.value_or(in.model.config_fp32 ? Dtype::fp32 : in.model.dtype);
  for (const std::string& q : quants) {
    for (const std::string& c : caches) {
      HfSettings s = base;
      s.quantization = q;
      s.cache_implementation = c;
      ServeFitRow row = fit_serve_row(hf_probe(in.model, s, fit.target), fit.limit);
      row.weights = q.empty() ? std::string(dtype_name(dtype)) : q;
      row.kv_cache = c;
      if (!g.contains("--quantization") && !q.empty()) row.flags.push_back("--quantization " + q);
      if (!g.contains("--cache-implementation")) row.flags.push_back("--cache-implementation " + c);
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
  } else if (in.engine == ServeEngine::sglang) {
    sglang_fit_rows(in, fit);
  } else if (in.engine == ServeEngine::hf) {
    hf_fit_rows(in, fit);
  } else {
    llama_cpp_fit_rows(in, fit);
  }
  const bool any = std::any_of(fit.rows.begin(), fit.rows.end(),
                               [](const ServeFitRow& r) { return r.best.has_value(); });
  ServeOutput out{in.format == "json" ? render_serve_fit_json(fit)
                                      : as_format(in.format, render_serve_fit_table(fit, in.unit)),
                  any ? 0 : 1};
  if (!in.plot.empty()) {
    out.plot_path = in.plot;
    out.plot = render_serve_fit_svg(fit, in.unit);
  }
  return out;
}

}  // namespace

ServeOutput serve_command(std::span<const std::string> args) {
  auto g = read_flags(args);
  if (g.contains("--help") || g.contains("-h")) return {help_text(), 0};
  g = without_switches_off(with_file(std::move(g)));
  if (g.contains("--max") && !g.contains("--fit")) {
    throw Error("--max: bounds the search of --fit (give --fit context or --fit concurrency)");
  }
  const ServeInputs in = read_inputs(std::move(g));
  return in.given.contains("--fit") ? fit_output(in) : estimate_output(in);
}

}  // namespace memest
