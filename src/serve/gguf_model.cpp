// `memest serve --gguf FILE`: a GGUF header as the model and its weights. The shapes are the
// metadata llama.cpp's loader reads (llm_load_hparams: {arch}.block_count, .embedding_length,
// .feed_forward_length, .attention.head_count(_kv), .attention.key_length, .context_length,
// .expert_count, the vocabulary as tokenizer.ggml.tokens' length), written as the config.json
// they stand for so that one parser builds the model; the weights are each tensor's own bytes.
#include "serve/gguf_header.hpp"
#include "serve/serve_gguf.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>
#include <memest/serve.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

namespace memest {
namespace {

using GgufJson = nlohmann::json;

std::string gguf_architecture(const GgufHeader& h, const std::string& source) {
  const auto it = h.metadata.find("general.architecture");
  if (it == h.metadata.end() || it->second.type != GgufType::string) {
    throw Error(
        fmt::format("{}: general.architecture: expected a string (the model's "
                    "architecture, e.g. \"llama\")",
                    source));
  }
  const std::string& arch = it->second.text;
  const bool plain =
      !arch.empty() && arch.size() <= 64 && std::all_of(arch.begin(), arch.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
      });
  if (!plain) {
    throw Error(
        fmt::format("{}: general.architecture: expected a name of a-z, 0-9 and _, got "
                    "\"{}\"",
                    source, gguf_shown(arch, 80)));
  }
  return arch;
}

// The Hugging Face model_type of a GGUF architecture: the same name, "qwen3moe" as
// "qwen3_moe", and llama with experts as mixtral (llama.cpp converts Mixtral to "llama").
std::string gguf_model_type(const std::string& arch, bool experts, const std::string& source) {
  std::string t = arch;
  if (t.ends_with("moe") && !t.ends_with("_moe")) t.insert(t.size() - 3, "_");
  if (t == "llama" && experts) t = "mixtral";
  const auto types = supported_model_types();
  if (std::find(types.begin(), types.end(), t) == types.end()) {
    throw Error(
        fmt::format("{}: general.architecture: \"{}\" has no model here (expected one of: "
                    "{})",
                    source, gguf_shown(arch, 80), fmt::join(types, ", ")));
  }
  return t;
}

u64 gguf_required(const GgufHeader& h, const std::string& key, const std::string& source) {
  const auto v = gguf_unsigned(h, key);
  if (!v || *v == 0) {
    throw Error(fmt::format("{}: {}: expected a positive integer in the metadata", source, key));
  }
  return *v;
}

// The config.json keys the metadata stands for; the optional ones only where present.
GgufJson gguf_config(const GgufHeader& h, const std::string& source) {
  const std::string arch = gguf_architecture(h, source);
  const auto key = [&](std::string_view k) { return fmt::format("{}.{}", arch, k); };
  GgufJson c;
  c["hidden_size"] = gguf_required(h, key("embedding_length"), source);
  c["num_hidden_layers"] = gguf_required(h, key("block_count"), source);
  c["num_attention_heads"] = gguf_required(h, key("attention.head_count"), source);
  c["num_key_value_heads"] =
      gguf_unsigned(h, key("attention.head_count_kv")).value_or(c["num_attention_heads"]);
  c["intermediate_size"] = gguf_required(h, key("feed_forward_length"), source);
  if (const auto d = gguf_unsigned(h, key("attention.key_length"))) c["head_dim"] = *d;
  if (const auto n = gguf_unsigned(h, key("context_length"))) c["max_position_embeddings"] = *n;
  if (const auto w = gguf_unsigned(h, key("attention.sliding_window"))) c["sliding_window"] = *w;
  const auto experts = gguf_unsigned(h, key("expert_count")).value_or(0);
  if (experts > 0) {
    c["num_local_experts"] = c["num_experts"] = experts;
    c["num_experts_per_tok"] = gguf_unsigned(h, key("expert_used_count")).value_or(2);
    const auto w = gguf_unsigned(h, key("expert_feed_forward_length"));
    c["moe_intermediate_size"] = w.value_or(c["intermediate_size"].get<u64>());
  }
  const auto tokens = h.metadata.find("tokenizer.ggml.tokens");
  if (tokens == h.metadata.end() || tokens->second.type != GgufType::array) {
    throw Error(fmt::format("{}: tokenizer.ggml.tokens: expected the vocabulary's array", source));
  }
  c["vocab_size"] = tokens->second.count;
  const bool has_output =
      std::any_of(h.tensors.begin(), h.tensors.end(),
                  [](const GgufTensorInfo& t) { return t.name == "output.weight"; });
  c["tie_word_embeddings"] = !has_output;
  c["model_type"] = gguf_model_type(arch, experts > 0, source);
  return c;
}

// The layer of a "blk.N.*" tensor; none for the others.
std::optional<u64> gguf_layer(std::string_view name) {
  if (!name.starts_with("blk.")) return std::nullopt;
  name.remove_prefix(4);
  u64 n = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
  if (ec != std::errc() || end == name.data()) return std::nullopt;
  return n;
}

}  // namespace

ServeModel gguf_serve_model(const GgufHeader& h, const std::string& source) {
  const std::string text = gguf_config(h, source).dump();
  ServeModel m;
  m.spec = parse_hf_config(text, source);
  if (!m.spec.arch) throw Error(fmt::format("serve: {}: the model's shapes are needed", source));
  m.spec.name = source;
  m.attention = read_attention_layers(text, source, m.spec.arch->num_layers);
  m.max_positions = gguf_unsigned(h, gguf_architecture(h, source) + ".context_length").value_or(0);
  return m;
}

ServeEstimate estimate_gguf(const ServeModel& m, const LlamaCppSettings& s, const GgufHeader& h) {
  LlamaWeightsInput w;
  w.note_last = true;
  bool has_output = false;
  std::map<std::string, u64> by_type;
  std::optional<LlamaTensor> embd;
  for (const GgufTensorInfo& t : h.tensors) {
    by_type[t.type_name] += 1;
    has_output = has_output || t.name == "output.weight";
    LlamaTensor x;
    x.name = t.name;
    x.layer = gguf_layer(t.name);
    x.input = t.name == "token_embd.weight";
    x.bytes = t.bytes;
    const u64 ne0 = t.dims.empty() ? 0 : t.dims[0];
    const u64 rows = t.dims.size() == 2 && ne0 > 0 ? t.dims[1] : 0;
    // A 2-D weight multiplied by GGML_OP_MUL_MAT: not the input, a norm or a 3-D expert stack.
    x.matrix = rows > 0 && !x.input && t.name.ends_with(".weight") &&
               t.name.find("norm") == std::string::npos;
    x.rows = x.matrix ? rows : 0;
    x.ne0 = ne0;
    x.pad_bytes = x.matrix && ne0 % 512 != 0 ? t.bytes / rows * (512 - ne0 % 512) / ne0 : 0;
    if (x.input) embd = x;
    w.tensors.push_back(std::move(x));
  }
  // A tied output: llama.cpp loads token_embd a second time as the output layer.
  if (embd && !has_output) {
    embd->input = false;
    embd->tied_copy = true;
    w.tensors.push_back(*embd);
  }
  std::vector<std::string> counts;
  counts.reserve(by_type.size());
  for (const auto& [type, n] : by_type) counts.push_back(fmt::format("{} {}", n, type));
  w.basis = fmt::format("GGUF tensors: {}", fmt::join(counts, " + "));
  return estimate_llama_cpp_weights(m, s, &w);
}

}  // namespace memest
