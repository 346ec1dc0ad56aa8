// The start-up floor for docs/performance.md: the least a one-shot C++ program of memest's kind
// does, with the same libraries and build flags. It parses 1 KB of JSON (a config.json, embedded
// like memest's presets) with nlohmann/json and prints a dozen lines with fmt. Whole-process
// timings of memest are compared with this program (hyperfine), not with an empty main().
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string_view>

namespace {

constexpr std::string_view kConfig = R"({
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000,
  "comment": "padding to one kilobyte: the size of a real config.json, as memest reads one per run, xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
})";

}  // namespace

int main() {
  const auto j = nlohmann::json::parse(kConfig);
  const auto h = j.at("hidden_size").get<std::uint64_t>();
  const auto l = j.at("num_hidden_layers").get<std::uint64_t>();
  const auto v = j.at("vocab_size").get<std::uint64_t>();
  const auto f = j.at("intermediate_size").get<std::uint64_t>();
  const std::uint64_t params = l * (4 * h * h + 3 * h * f + 2 * h) + 2 * v * h + h;
  fmt::print("model      {}: {} parameters\n", j.at("_name_or_path").get<std::string>(), params);
  for (const char* row : {"parameters", "gradients", "optimizer states", "activations"}) {
    fmt::print("{:<26} {:>8} {:>16.2f} GB\n", row, "fp32", static_cast<double>(params) * 4e-9);
  }
  fmt::print("{:<52} {:>9.2f} GB\n", "device total", static_cast<double>(params) * 16e-9);
  return 0;
}
