#pragma once
// `memest serve`'s options as one table (src/serve/serve_options.cpp): each engine's own flag
// names, with the value kinds and defaults of the run-option table (run_options.hpp), the names
// each takes from the engine's own name table, and the engine a flag belongs to. The flags and
// `memest serve --help`, the serve run config's keys and its JSON Schema (serve_config.hpp), the
// Python keywords and the web form are generated from it.

#include <memest/run_options.hpp>
#include <memest/serve.hpp>

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// The engines a serve option applies to, a set (bit i is ServeEngine i); a flag of one engine
/// given to another is refused.
enum class ServeFor : unsigned {
  vllm = 1U,
  llama_cpp = 2U,
  sglang = 4U,
  hf = 8U,
  all = 15U,
};

/// The union of two sets of engines.
constexpr ServeFor operator|(ServeFor a, ServeFor b) {
  return static_cast<ServeFor>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

/// The set of one engine.
constexpr ServeFor serve_for(ServeEngine engine) {
  return static_cast<ServeFor>(1U << static_cast<unsigned>(engine));
}

/// Whether the set holds `engine`.
constexpr bool serve_for_has(ServeFor set, ServeEngine engine) {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(serve_for(engine))) != 0;
}

/// One serve option. Rows are in --help order; a new flag is a new row.
struct ServeOptionInfo {
  std::string flag;  ///< "--max-model-len"
  ServeFor engine = ServeFor::all;
  std::string type_name;  ///< "N", "NAME", ... for --help; empty for a switch
  std::string help;
  ValueKind kind = ValueKind::flag;
  /// The names a choice (or a name) takes, from the engine's own name table; for an option both
  /// engines take with different names (--quantization), vLLM's.
  std::span<const std::string_view> (*choices)() = nullptr;
  /// llama.cpp's names where they differ from `choices` (--quantization's GGUF file types).
  std::span<const std::string_view> (*llama_cpp_choices)() = nullptr;
  /// SGLang's names where they differ from `choices` (--kv-cache-dtype's).
  std::span<const std::string_view> (*sglang_choices)() = nullptr;
  /// Hugging Face transformers' names where they differ from `choices` (--dtype's float32,
  /// --quantization's bitsandbytes modes).
  std::span<const std::string_view> (*hf_choices)() = nullptr;
  OptionDefault fallback;
  std::string_view alias_of;  ///< "--tensor-parallel-size" for --tp
  /// Whether a serve run config has the option as a key; false for the output's form, the
  /// question asked (--fit, --max), the file itself and --help.
  bool config_key = true;
};

/// Every serve option, in --help order.
const std::vector<ServeOptionInfo>& serve_option_table();

/// The row of `flag` ("--ctx-size"), or nullptr.
const ServeOptionInfo* find_serve_option(std::string_view flag);

/// The run-config key and the Python keyword of a flag: "--max-model-len" is "max_model_len".
std::string serve_config_key(std::string_view flag);

/// Whether the option applies to `engine`.
bool serve_option_applies(const ServeOptionInfo& info, ServeEngine engine);

/// The names the option takes on `engine`; empty when it takes no list of names.
std::span<const std::string_view> serve_choices(const ServeOptionInfo& info, ServeEngine engine);

/// Whether the option's names differ by engine (llama.cpp's, SGLang's or hf's own list).
bool serve_choices_differ(const ServeOptionInfo& info);

/// The engines of the option in --help's words: "" for every engine, else "[vllm] ",
/// "[vllm, sglang] ", ...
std::string serve_engines_prefix(const ServeOptionInfo& info);

/// The engines of the option as an error names them: "vLLM", "vLLM and SGLang", "vLLM, SGLang
/// and hf".
std::string serve_engines_words(const ServeOptionInfo& info);

/// --engine's names, in ServeEngine's order ("vllm", "llama.cpp", "sglang", "hf").
std::span<const std::string_view> serve_engine_names();

/// The engine's name as --engine takes it.
std::string_view serve_engine_name(ServeEngine engine);

/// A serve option's value as given, with where: "--ctx-size" for a flag, "run.json: /ctx_size"
/// for a run config's key; a switch's text is empty.
struct ServeValue {
  std::string text;
  std::string where;
};

/// The values given, by flag.
using ServeValues = std::map<std::string, ServeValue, std::less<>>;

}  // namespace memest
