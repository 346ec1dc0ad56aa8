// `memest serve`'s options: one row per flag, with the engine it belongs to, its value kind, the
// names it takes (each engine's own name table: vLLM's KV-cache dtypes and quantization methods,
// ggml's cache types, the GGUF file types) and its default. The rows are the serve flags' one
// source: serve_command.cpp parses them, serve_config.cpp reads and describes run configs with
// them, and the Python module and the web page are generated from them.
#include "serve/serve_gguf.hpp"

#include <memest/error.hpp>
#include <memest/serve_options.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

using ServeNames = std::span<const std::string_view> (*)();

constexpr std::array<std::string_view, 4> kEngineNames = {"vllm", "llama.cpp", "sglang", "hf"};
// data table: each engine as an error names it, in ServeEngine's order
constexpr std::array<std::string_view, 4> kEngineWords = {"vLLM", "llama.cpp", "SGLang", "hf"};
constexpr std::array<std::string_view, 3> kFormatNames = {"table", "json", "markdown"};
constexpr std::array<std::string_view, 2> kFitNames = {"context", "concurrency"};
constexpr std::array<std::string_view, 3> kSplitModeNames = {"none", "layer", "row"};

std::span<const std::string_view> serve_engine_list() { return kEngineNames; }
std::span<const std::string_view> serve_format_names() { return kFormatNames; }
std::span<const std::string_view> serve_fit_names() { return kFitNames; }
std::span<const std::string_view> serve_split_mode_names() { return kSplitModeNames; }

// "a, b or c", as the help lists a few names.
std::string serve_or_list(std::span<const std::string_view> names) {
  if (names.size() < 2) return fmt::format("{}", fmt::join(names, ""));
  return fmt::format("{} or {}", fmt::join(names.first(names.size() - 1), ", "), names.back());
}

struct ServeRow {
  ServeOptionInfo info;
  ServeRow(std::string flag, ServeFor engine, std::string type, std::string help) {
    info.flag = std::move(flag);
    info.engine = engine;
    info.type_name = std::move(type);
    info.help = std::move(help);
  }
  ServeRow&& kind(ValueKind k, ServeNames names = nullptr) && {
    info.kind = k;
    info.choices = names;
    return std::move(*this);
  }
  ServeRow&& fallback(std::string_view value, std::string_view from = "") && {
    info.fallback = {value, from};
    return std::move(*this);
  }
  ServeRow&& llama_cpp(ServeNames names) && {
    info.llama_cpp_choices = names;
    return std::move(*this);
  }
  ServeRow&& sglang(ServeNames names) && {
    info.sglang_choices = names;
    return std::move(*this);
  }
  ServeRow&& hf(ServeNames names) && {
    info.hf_choices = names;
    return std::move(*this);
  }
  ServeRow&& alias_of(std::string_view of) && {
    info.alias_of = of;
    return std::move(*this);
  }
  ServeRow&& flag_only() && {
    info.config_key = false;
    return std::move(*this);
  }
};

// The model, the device and the output, which both engines take.
std::vector<ServeRow> serve_common_rows() {
  std::vector<ServeRow> r;
  r.push_back(ServeRow("--model", ServeFor::all, "NAME",
                       "Model preset, Hub id (local cache) or model folder")
                  .kind(ValueKind::name, run_option("--model").choices));
  r.push_back(ServeRow("--config", ServeFor::all, "PATH", "A Hugging Face config.json")
                  .kind(ValueKind::path));
  r.push_back(
      ServeRow("--engine", ServeFor::all, "NAME", serve_or_list(kEngineNames) + " (default vllm)")
          .kind(ValueKind::choice, serve_engine_list)
          .fallback("vllm"));
  r.push_back(ServeRow("--gpu", ServeFor::all, "NAME",
                       "GPU preset: its memory is the total (default h100-80gb)")
                  .kind(ValueKind::choice, run_option("--gpu").choices)
                  .fallback("h100-80gb"));
  r.push_back(
      ServeRow("--gpu-memory", ServeFor::all, "SIZE",
               "Total device memory as torch.cuda.mem_get_info reports it (overrides --gpu)")
          .kind(ValueKind::size)
          .fallback("", "--gpu's memory"));
  r.push_back(ServeRow("--format", ServeFor::all, "FORMAT",
                       serve_or_list(kFormatNames) + " (default table)")
                  .kind(ValueKind::choice, serve_format_names)
                  .fallback("table")
                  .flag_only());
  r.push_back(ServeRow("--units", ServeFor::all, "UNIT", "Units of the table (default GiB)")
                  .kind(ValueKind::choice, unit_names)
                  .fallback("GiB")
                  .flag_only());
  r.push_back(ServeRow("--plot", ServeFor::all, "FILE",
                       "Also draw an SVG picture to FILE: what a device holds (with --fit, at "
                       "each row's largest value)")
                  .kind(ValueKind::path)
                  .flag_only());
  return r;
}

// data table: vLLM's flags, as its engine/arg_utils.py names them
std::vector<ServeRow> serve_vllm_rows() {
  std::vector<ServeRow> r;
  r.push_back(ServeRow("--max-model-len", ServeFor::vllm, "N",
                       "Longest request in tokens (default: the model's)")
                  .kind(ValueKind::count)
                  .fallback("", "the model's max_position_embeddings"));
  r.push_back(ServeRow("--max-num-seqs", ServeFor::vllm, "N",
                       "Requests per step (default 1024 on >= 70 GiB, else 256)")
                  .kind(ValueKind::count)
                  .fallback("", "1024 on >= 70 GiB, else 256"));
  r.push_back(ServeRow("--max-num-batched-tokens", ServeFor::vllm, "N",
                       "Tokens per step (default 8192 on >= 70 GiB, else 2048)")
                  .kind(ValueKind::count)
                  .fallback("", "8192 on >= 70 GiB, else 2048"));
  r.push_back(ServeRow("--gpu-memory-utilization", ServeFor::vllm, "F",
                       "Fraction of the total vLLM may use (0.9)")
                  .kind(ValueKind::fraction)
                  .fallback("0.9"));
  r.push_back(ServeRow("--kv-cache-dtype", ServeFor::vllm | ServeFor::sglang, "NAME",
                       serve_or_list(vllm_kv_cache_dtypes()) + " (default auto)")
                  .kind(ValueKind::choice, vllm_kv_cache_dtypes)
                  .sglang(sglang_kv_cache_dtypes)
                  .fallback("auto"));
  r.push_back(ServeRow("--dtype", ServeFor::vllm | ServeFor::sglang | ServeFor::hf, "NAME",
                       "auto, bfloat16, float16 (default auto: the config's); hf also float32")
                  .kind(ValueKind::choice, vllm_dtype_names)
                  .sglang(sglang_dtype_names)
                  .hf(hf_dtype_names)
                  .fallback("auto"));
  r.push_back(
      ServeRow(
          "--quantization", ServeFor::all, "NAME",
          "vllm: fp8, compressed-tensors (FP8 weights), gptq, gptq_marlin, awq, "
          "awq_marlin (the checkpoint's int4/int8 groups), bitsandbytes (NF4); llama.cpp: a GGUF "
          "file type (Q4_K_M, ...); hf: bnb-4bit, bnb-8bit")
          .kind(ValueKind::choice, vllm_quantization_methods)
          .llama_cpp(gguf_file_type_names)
          .hf(hf_quantization_names)
          .fallback("", "the checkpoint's"));
  r.push_back(ServeRow("--tensor-parallel-size", ServeFor::vllm | ServeFor::sglang, "N",
                       "Tensor-parallel ranks (default 1)")
                  .kind(ValueKind::count)
                  .fallback("1"));
  r.push_back(
      ServeRow("--tp", ServeFor::vllm | ServeFor::sglang, "N", "Short for --tensor-parallel-size")
          .kind(ValueKind::count)
          .alias_of("--tensor-parallel-size"));
  r.push_back(ServeRow("--block-size", ServeFor::vllm, "N", "Tokens per KV block (default 16)")
                  .kind(ValueKind::count)
                  .fallback("16"));
  r.push_back(ServeRow("--enforce-eager", ServeFor::vllm, "", "No CUDA graphs").fallback("false"));
  r.push_back(ServeRow("--kv-cache-memory", ServeFor::vllm, "BYTES",
                       "KV-cache bytes per device, instead of the budget")
                  .kind(ValueKind::size)
                  .fallback("", "the budget"));
  r.push_back(
      ServeRow("--non-torch-memory", ServeFor::vllm, "SIZE",
               "Memory the profile run adds outside torch (default 0.25 GiB, 2 GiB under TP)")
          .kind(ValueKind::size)
          .fallback("", "0.25 GiB, 2 GiB under TP"));
  return r;
}

// data table: SGLang's flags, as its python/sglang/srt/server_args.py names them (the ones they
// share with vLLM, --dtype, --kv-cache-dtype, --quantization, --tensor-parallel-size and --tp, are
// vLLM's rows)
std::vector<ServeRow> serve_sglang_rows() {
  std::vector<ServeRow> r;
  r.push_back(ServeRow("--context-length", ServeFor::sglang, "N",
                       "Longest request in tokens (default: the model's)")
                  .kind(ValueKind::count)
                  .fallback("", "the model's max_position_embeddings"));
  r.push_back(ServeRow("--mem-fraction-static", ServeFor::sglang, "F",
                       "Fraction of the total for weights and KV pool (default: by GPU memory)")
                  .kind(ValueKind::fraction)
                  .fallback("", "(total - reserved) / total, reserved by GPU memory and TP"));
  r.push_back(ServeRow("--max-running-requests", ServeFor::sglang, "N",
                       "Requests at once (default: KV tokens / 2, at most the request pool)")
                  .kind(ValueKind::count)
                  .fallback("", "max_total_num_tokens / 2"));
  r.push_back(ServeRow("--max-total-tokens", ServeFor::sglang, "N",
                       "Caps the KV pool's tokens (default: what the memory holds)")
                  .kind(ValueKind::count)
                  .fallback("", "what the memory holds"));
  r.push_back(ServeRow("--chunked-prefill-size", ServeFor::sglang, "N",
                       "Prefill chunk in tokens (default 2048-16384 by GPU memory)")
                  .kind(ValueKind::count)
                  .fallback("", "by GPU memory"));
  r.push_back(ServeRow("--page-size", ServeFor::sglang, "N", "Tokens per KV page (default 1)")
                  .kind(ValueKind::count)
                  .fallback("1"));
  r.push_back(ServeRow("--cuda-graph-max-bs", ServeFor::sglang, "N",
                       "Largest batch captured in a CUDA graph (default by GPU memory and TP)")
                  .kind(ValueKind::count)
                  .fallback("", "by GPU memory and TP"));
  r.push_back(
      ServeRow("--disable-cuda-graph", ServeFor::sglang, "", "No CUDA graphs").fallback("false"));
  r.push_back(ServeRow("--tp-size", ServeFor::sglang, "N", "Short for --tensor-parallel-size")
                  .kind(ValueKind::count)
                  .alias_of("--tensor-parallel-size"));
  return r;
}

// data table: llama.cpp's flags, as its common/arg.cpp names them
std::vector<ServeRow> serve_llama_cpp_rows() {
  std::vector<ServeRow> r;
  r.push_back(
      ServeRow("--ctx-size", ServeFor::llama_cpp, "N", "Context cells (default: the model's)")
          .kind(ValueKind::count)
          .fallback("", "the model's max_position_embeddings"));
  r.push_back(ServeRow("--batch-size", ServeFor::llama_cpp | ServeFor::hf, "N",
                       "llama.cpp: logical batch (default 2048); hf: sequences generated at "
                       "once (default 1)")
                  .kind(ValueKind::count)
                  .fallback("", "2048 on llama.cpp, 1 on hf"));
  r.push_back(ServeRow("--ubatch-size", ServeFor::llama_cpp, "N",
                       "Micro-batch the compute buffer is sized for (512)")
                  .kind(ValueKind::count)
                  .fallback("512"));
  r.push_back(
      ServeRow("--parallel", ServeFor::llama_cpp, "N", "Sequences sharing the context (default 1)")
          .kind(ValueKind::count)
          .fallback("1"));
  for (const char* flag : {"--cache-type-k", "--cache-type-v"}) {
    r.push_back(ServeRow(flag, ServeFor::llama_cpp, "TYPE", "f16, q8_0, q4_0, ... (default f16)")
                    .kind(ValueKind::choice, ggml_cache_type_names)
                    .fallback("f16"));
  }
  r.push_back(
      ServeRow("--n-gpu-layers", ServeFor::llama_cpp, "N", "Layers on the GPU (default all)")
          .kind(ValueKind::count)
          .fallback("", "every layer"));
  r.push_back(
      ServeRow("--flash-attn", ServeFor::llama_cpp, "", "Flash attention (pads the context to 256)")
          .fallback("false"));
  r.push_back(
      ServeRow("--gguf", ServeFor::llama_cpp, "FILE",
               "A GGUF file: its header's tensor types size the weights, its metadata is the "
               "model without --model")
          .kind(ValueKind::path));
  r.push_back(ServeRow("--mla", ServeFor::llama_cpp, "",
                       "MLA models: cache the latent only (ik_llama.cpp -mla 2/3)")
                  .fallback("false"));
  r.push_back(ServeRow("--quantizer", ServeFor::llama_cpp, "BUILD",
                       "The quantizer whose type rules made the GGUF file: current or 2023-12 "
                       "(Mixtral's first files) (default current)")
                  .kind(ValueKind::choice, gguf_quantizer_names)
                  .fallback("current"));
  r.push_back(ServeRow("--custom-q", ServeFor::llama_cpp, "LIST",
                       "REGEX=TYPE,...: the file's own type rules over --quantization's, as "
                       "ik_llama.cpp's llama-quantize --custom-q (ffn_down_exps=iq4_k)")
                  .kind(ValueKind::text));
  r.push_back(ServeRow("--fused-moe", ServeFor::llama_cpp, "",
                       "MoE models: the experts' up and gate in one op (ik_llama.cpp -fmoe)")
                  .fallback("false"));
  r.push_back(ServeRow("--attention-max-batch", ServeFor::llama_cpp, "MIB",
                       "MLA models: the MiB of f32 keys and values one group of heads may take "
                       "in a prompt's attention (ik_llama.cpp -amb) (default: all heads at once)")
                  .kind(ValueKind::count)
                  .fallback("", "all heads at once"));
  return r;
}

// data table: llama.cpp's flags for several GPUs and for tensors kept elsewhere (common/arg.cpp)
std::vector<ServeRow> serve_llama_cpp_device_rows() {
  std::vector<ServeRow> r;
  r.push_back(
      ServeRow("--device", ServeFor::llama_cpp, "LIST",
               "The GPUs to use, comma-separated, CUDA0,CUDA1,... (default CUDA0), each a --gpu")
          .kind(ValueKind::text)
          .fallback("CUDA0"));
  r.push_back(ServeRow("--split-mode", ServeFor::llama_cpp, "MODE",
                       "none (--main-gpu only), layer (layers by --tensor-split) or row (matrices "
                       "split by rows too) (default layer)")
                  .kind(ValueKind::choice, serve_split_mode_names)
                  .fallback("layer"));
  r.push_back(
      ServeRow("--tensor-split", ServeFor::llama_cpp, "LIST",
               "Each device's share, comma-separated (3,1; default: by free memory, equal here)")
          .kind(ValueKind::text)
          .fallback("", "equal shares"));
  r.push_back(ServeRow("--main-gpu", ServeFor::llama_cpp, "N",
                       "The device of --split-mode none (default 0)")
                  .kind(ValueKind::text)
                  .fallback("0"));
  r.push_back(ServeRow("--override-tensor", ServeFor::llama_cpp, "LIST",
                       "PATTERN=BUFT,...: tensors whose name matches the regex go to CPU or a "
                       "device (exps=CPU)")
                  .kind(ValueKind::text));
  // GGML_SCHED_MAX_COPIES, ggml/src/ggml-backend.c (ikawrakow/ik_llama.cpp at 4084ca73): a
  // cmake option of the build, 4 unless set
  r.push_back(ServeRow("--sched-copies", ServeFor::llama_cpp, "N",
                       "The build's GGML_SCHED_MAX_COPIES: copies of each split's inputs kept "
                       "under pipeline parallelism (default 4)")
                  .kind(ValueKind::count)
                  .fallback("4"));
  return r;
}

// data table: Hugging Face transformers' model.generate() and from_pretrained() arguments
std::vector<ServeRow> serve_hf_rows() {
  std::vector<ServeRow> r;
  r.push_back(ServeRow("--prompt-len", ServeFor::hf, "N",
                       "Prompt tokens per sequence (input_ids' length; needed)")
                  .kind(ValueKind::count));
  r.push_back(ServeRow("--input-len", ServeFor::hf, "N", "Short for --prompt-len")
                  .kind(ValueKind::count)
                  .alias_of("--prompt-len"));
  r.push_back(ServeRow("--max-new-tokens", ServeFor::hf, "N",
                       "generate(max_new_tokens=): tokens generated per sequence (needed)")
                  .kind(ValueKind::count));
  r.push_back(ServeRow("--attn-implementation", ServeFor::hf, "NAME",
                       serve_or_list(hf_attn_implementations()) + " (default sdpa)")
                  .kind(ValueKind::choice, hf_attn_implementations)
                  .fallback("sdpa"));
  r.push_back(ServeRow("--cache-implementation", ServeFor::hf, "NAME",
                       serve_or_list(hf_cache_implementations()) + " (default dynamic)")
                  .kind(ValueKind::choice, hf_cache_implementations)
                  .fallback("dynamic"));
  return r;
}

// The question asked of the estimate, the run config itself and the help.
std::vector<ServeRow> serve_command_rows() {
  std::vector<ServeRow> r;
  r.push_back(
      ServeRow("--fit", ServeFor::all, "WHAT",
               serve_or_list(kFitNames) +
                   ": the largest --max-model-len/--ctx-size/--prompt-len or "
                   "--max-num-seqs/--parallel/--batch-size that fits, per weight format and "
                   "KV-cache type")
          .kind(ValueKind::choice, serve_fit_names)
          .flag_only());
  r.push_back(ServeRow("--max", ServeFor::all, "N",
                       "--fit: the largest value tried (default: the model's positions for a "
                       "context; max_num_batched_tokens or n_ctx's 2^32 - 1 cells for concurrency)")
                  .kind(ValueKind::count)
                  .fallback("", "the model's positions, or the engine's limit")
                  .flag_only());
  r.push_back(
      ServeRow("--file", ServeFor::all, "PATH",
               "A serve run config (JSON; keys as the flags: max_model_len); flags override it")
          .kind(ValueKind::path)
          .flag_only());
  r.push_back(ServeRow("--help", ServeFor::all, "", "This help").flag_only());
  r.push_back(ServeRow("-h", ServeFor::all, "", "This help").flag_only());
  return r;
}

std::vector<ServeOptionInfo> build_serve_table() {
  std::vector<ServeOptionInfo> out;
  for (auto rows :
       {serve_common_rows(), serve_vllm_rows(), serve_sglang_rows(), serve_llama_cpp_rows(),
        serve_llama_cpp_device_rows(), serve_hf_rows(), serve_command_rows()}) {
    for (ServeRow& r : rows) out.push_back(std::move(r.info));
  }
  return out;
}

}  // namespace

const std::vector<ServeOptionInfo>& serve_option_table() {
  static const std::vector<ServeOptionInfo> table = build_serve_table();
  return table;
}

const ServeOptionInfo* find_serve_option(std::string_view flag) {
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (f.flag == flag) return &f;
  }
  return nullptr;
}

std::string serve_config_key(std::string_view flag) {
  std::string key(flag.substr(flag.find_first_not_of('-')));
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

bool serve_option_applies(const ServeOptionInfo& info, ServeEngine engine) {
  return serve_for_has(info.engine, engine);
}

std::span<const std::string_view> serve_choices(const ServeOptionInfo& info, ServeEngine engine) {
  if (engine == ServeEngine::llama_cpp && info.llama_cpp_choices) return info.llama_cpp_choices();
  if (engine == ServeEngine::sglang && info.sglang_choices) return info.sglang_choices();
  if (engine == ServeEngine::hf && info.hf_choices) return info.hf_choices();
  return info.choices ? info.choices() : std::span<const std::string_view>();
}

bool serve_choices_differ(const ServeOptionInfo& info) {
  return info.llama_cpp_choices != nullptr || info.sglang_choices != nullptr ||
         info.hf_choices != nullptr;
}

std::string serve_engines_prefix(const ServeOptionInfo& info) {
  if (info.engine == ServeFor::all) return "";
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < kEngineNames.size(); ++i) {
    if (serve_for_has(info.engine, static_cast<ServeEngine>(i))) names.push_back(kEngineNames[i]);
  }
  return fmt::format("[{}] ", fmt::join(names, ", "));
}

std::string serve_engines_words(const ServeOptionInfo& info) {
  std::vector<std::string_view> words;
  for (std::size_t i = 0; i < kEngineWords.size(); ++i) {
    if (serve_for_has(info.engine, static_cast<ServeEngine>(i))) words.push_back(kEngineWords[i]);
  }
  if (words.size() < 3) return fmt::format("{}", fmt::join(words, " and "));
  const std::string_view last = words.back();
  words.pop_back();
  return fmt::format("{} and {}", fmt::join(words, ", "), last);
}

std::span<const std::string_view> serve_engine_names() { return kEngineNames; }

std::string_view serve_engine_name(ServeEngine engine) {
  return kEngineNames[static_cast<std::size_t>(engine)];
}

}  // namespace memest
