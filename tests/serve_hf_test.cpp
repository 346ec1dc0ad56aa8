// transformers' model.generate() (memest serve --engine hf) against bytes derived by hand on two
// small configs: a Llama with GQA (4 query heads, 2 kv heads of 16) and a Mistral whose every
// layer slides over 8 tokens; batch 3 unless a case says otherwise. No HF log is in the
// reference data, so every figure below is the sum of the tensors docs/serving.md lists.
#include "testutil.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>

namespace {

using memest::test::run_cli;
using memest::test::TempDir;
using Json = nlohmann::json;

// hidden 64, MLP 128, 2 layers, 4 heads and 2 kv heads of 16, vocabulary 256, untied, bf16.
const char* const kLlama = R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 4096, "tie_word_embeddings": false, "torch_dtype": "%s"})";

// The same shapes, every layer sliding over 8 tokens (Mistral's sliding_window).
const char* const kMistral = R"({"model_type": "mistral", "architectures": ["MistralForCausalLM"],
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 4096, "sliding_window": 8, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16"})";

std::string hf_config(const TempDir& dir, const std::string& name, std::string text,
                      const std::string& dtype = "bfloat16") {
  if (const auto at = text.find("%s"); at != std::string::npos) text.replace(at, 2, dtype);
  const std::string path = (dir.path / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

Json hf_json(const std::string& config, std::vector<std::string> flags) {
  std::vector<std::string> args = {"serve", "--engine", "hf",  "--config",
                                   config,  "--format", "json"};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return Json::parse(r.out);
}

// The parameters in bf16: embedding and lm_head 256 x 64 each; per layer q and o 64 x 64, k and
// v 32 x 64, gate, up and down 128 x 64, two norms of 64; the final norm.
constexpr std::uint64_t kLayerElements = 2 * 4096 + 2 * 2048 + 3 * 8192 + 2 * 64;
constexpr std::uint64_t kBf16Weights = 2 * (2 * 256 * 64 + 2 * kLayerElements + 64);

// K and V of one token in one layer: 2 kv heads x 16 x 2 bytes each.
constexpr std::uint64_t kKvTokenLayer = 2 * 2 * 16 * 2;

}  // namespace

TEST_CASE("serve hf: weights in the config's dtype, --dtype and bitsandbytes", "[serve][hf]") {
  TempDir dir("serve-hf-weights");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  const std::vector<std::string> lengths = {"--prompt-len", "10", "--max-new-tokens", "5"};
  CHECK(hf_json(llama, lengths)["weights"]["bytes"] == kBf16Weights);
  // A float32 config loads in float32 under torch_dtype="auto" (vLLM would serve it in bf16).
  const std::string fp32 = hf_config(dir, "fp32.json", kLlama, "float32");
  CHECK(hf_json(fp32, lengths)["weights"]["bytes"] == 2 * kBf16Weights);
  auto flags = lengths;
  flags.insert(flags.end(), {"--dtype", "float32"});
  CHECK(hf_json(llama, flags)["weights"]["bytes"] == 2 * kBf16Weights);
  // Every linear but lm_head in bitsandbytes; the embeddings, lm_head and norms in bf16.
  const std::uint64_t rest = 2 * (2 * 256 * 64 + 5 * 64);
  // 4-bit (fp4, no double quantisation): n / 2 bytes, the 16-entry fp32 code, an fp32 absmax
  // per 64: q and o 2048 + 64 + 256, k and v 1024 + 64 + 128, gate, up, down 4096 + 64 + 512.
  const std::uint64_t four = 2 * (2 * 2368 + 2 * 1216 + 3 * 4672);
  flags = lengths;
  flags.insert(flags.end(), {"--quantization", "bnb-4bit"});
  CHECK(hf_json(llama, flags)["weights"]["bytes"] == four + rest);
  // 8-bit: n int8 and an fp32 SCB per output row.
  const std::uint64_t eight =
      2 * (2 * (4096 + 4 * 64) + 2 * (2048 + 4 * 32) + 2 * (8192 + 4 * 128) + (8192 + 4 * 64));
  flags = lengths;
  flags.insert(flags.end(), {"--quantization", "bnb-8bit"});
  CHECK(hf_json(llama, flags)["weights"]["bytes"] == eight + rest);
}

TEST_CASE("serve hf: the dynamic cache and the prompt's forward (GQA, batch 3)", "[serve][hf]") {
  TempDir dir("serve-hf-dynamic");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  // 3 prompts of 10 tokens, 5 new: the last forward caches 10 + 5 - 1 = 14 tokens.
  const Json j =
      hf_json(llama, {"--prompt-len", "10", "--max-new-tokens", "5", "--batch-size", "3"});
  CHECK(j["engine"] == "hf");
  CHECK(j["kv_cache"]["bytes_per_token"] == 2 * kKvTokenLayer);
  CHECK(j["kv_cache"]["bytes"] == 3 * 14 * 2 * kKvTokenLayer);
  CHECK(j["kv_cache"]["tokens"] == 3 * 14);
  CHECK(j["kv_cache"]["blocks"].is_null());
  CHECK(j["context"] == 15);
  // The prompt's forward at its last layer: the residual and the normed input (3 x 10 x 64 x 2
  // each) and the rotary cos and sin (3 x 10 x 16 x 2 each) under the MLP's act(gate), up and
  // their product (3 x 10 x 128 x 2 each), which outweighs sdpa's query and output and the
  // last token's logits; beside the cache of 10 tokens in both layers.
  const std::uint64_t base = 2 * 3 * 10 * 64 * 2 + 2 * 3 * 10 * 16 * 2;
  const std::uint64_t mlp = base + 3 * 3 * 10 * 128 * 2;
  CHECK(j["activations"]["peak_bytes"] == mlp);
  CHECK(j["peak"]["bytes"] == kBf16Weights + 3 * 10 * 2 * kKvTokenLayer + mlp);
  // Offloaded: at the end the layer being updated (14 tokens) and the prefetched next one (13)
  // on the device, the whole cache on the host; after the prompt, one layer of 10 tokens.
  const Json off = hf_json(llama, {"--prompt-len", "10", "--max-new-tokens", "5", "--batch-size",
                                   "3", "--cache-implementation", "offloaded"});
  CHECK(off["kv_cache"]["bytes"] == 3 * (14 + 13) * kKvTokenLayer);
  CHECK(off["peak"]["bytes"] == kBf16Weights + 3 * 10 * kKvTokenLayer + mlp);
}

TEST_CASE("serve hf: a long generation peaks at the last torch.cat", "[serve][hf]") {
  TempDir dir("serve-hf-cat");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  // 4 prompt tokens, 200 new: the last forward caches 203 tokens in each layer, and the last
  // layer's V cat holds its old 202-token tensor beside the new one, with the residual, the
  // normed input, cos and sin, the query and the projected K and V of the one new token.
  const Json j = hf_json(llama, {"--prompt-len", "4", "--max-new-tokens", "200"});
  const std::uint64_t cache = 203 * 2 * kKvTokenLayer;
  const std::uint64_t old = 202 * kKvTokenLayer / 2;
  const std::uint64_t update = (2 * 64 * 2 + 2 * 16 * 2) + 4 * 16 * 2 + kKvTokenLayer + old;
  CHECK(j["kv_cache"]["bytes"] == cache);
  CHECK(j["activations"]["peak_bytes"] == update);
  CHECK(j["peak"]["bytes"] == kBf16Weights + cache + update);
}

TEST_CASE("serve hf: eager attention materialises the scores", "[serve][hf]") {
  TempDir dir("serve-hf-eager");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  // One prompt of 64 tokens: repeat_kv's K and V for 4 heads (2 x 4 x 64 x 16 x 2), the float
  // mask (64 x 64 x 2), the scores in bf16, their fp32 softmax and its bf16 cast (4 x 64 x 64 x
  // (2 + 4 + 2)) beside the query (64 x 4 x 16 x 2) and the residual stream.
  const std::vector<std::string> flags = {"--prompt-len", "64", "--max-new-tokens", "2"};
  auto eager = flags;
  eager.insert(eager.end(), {"--attn-implementation", "eager"});
  const std::uint64_t base = 2 * 64 * 64 * 2 + 2 * 64 * 16 * 2;
  const std::uint64_t attention =
      base + 64 * 4 * 16 * 2 + 2 * 4 * 64 * 16 * 2 + 64 * 64 * 2 + 4 * 64 * 64 * 8;
  const Json j = hf_json(llama, eager);
  CHECK(j["activations"]["peak_bytes"] == attention);
  CHECK(j["peak"]["bytes"] == kBf16Weights + 64 * 2 * kKvTokenLayer + attention);
  // sdpa and flash_attention_2 keep no scores: the MLP is the widest moment there.
  const std::uint64_t mlp = base + 3 * 64 * 128 * 2;
  CHECK(hf_json(llama, flags)["activations"]["peak_bytes"] == mlp);
  auto flash = flags;
  flash.insert(flash.end(), {"--attn-implementation", "flash_attention_2"});
  CHECK(hf_json(llama, flash)["activations"]["peak_bytes"] == mlp);
}

TEST_CASE("serve hf: an MoE block's expert loop at its widest expert", "[serve][hf]") {
  TempDir dir("serve-hf-moe");
  // The Llama's shapes with 4 experts of width 96, 2 per token, in every layer (Mixtral).
  const std::string mixtral = hf_config(dir, "mixtral.json", R"({"model_type": "mixtral",
    "architectures": ["MixtralForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 256, "max_position_embeddings": 4096, "num_local_experts": 4,
    "num_experts_per_tok": 2, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})");
  const Json j =
      hf_json(mixtral, {"--prompt-len", "10", "--max-new-tokens", "5", "--batch-size", "3"});
  // Per layer: attention 12,288 elements, 4 experts of 3 x 96 x 64, the router 4 x 64, 2 norms.
  CHECK(j["weights"]["bytes"] ==
        2 * (2 * 256 * 64 + 2 * (12288 + 4 * 3 * 96 * 64 + 256 + 128) + 64));
  // 30 tokens: the router's logits (30 x 4 x 2), top-k's weights and indices (30 x 2 x (2 + 8)),
  // the zeroed output and the expert's input rows (30 x 64 x 2 each), one_hot's mask (4 x 2 x
  // 30 x 8) and the expert's act(gate), up and product (30 x 96 x 2 each), every token at one
  // expert; beside the residual stream.
  const std::uint64_t base = 2 * 3 * 10 * 64 * 2 + 2 * 3 * 10 * 16 * 2;
  const std::uint64_t moe =
      30 * 4 * 2 + 30 * 2 * 10 + 2 * 30 * 64 * 2 + 4 * 2 * 30 * 8 + 3 * 30 * 96 * 2;
  CHECK(j["activations"]["peak_bytes"] == base + moe);
}

TEST_CASE("serve hf: the static cache allocates max_length - 1 up front", "[serve][hf]") {
  TempDir dir("serve-hf-static");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  const Json j = hf_json(llama, {"--prompt-len", "10", "--max-new-tokens", "5", "--batch-size", "3",
                                 "--cache-implementation", "static"});
  const std::uint64_t cache = 3 * 14 * 2 * kKvTokenLayer;
  CHECK(j["kv_cache"]["bytes"] == cache);
  // The whole allocation is there during the prompt's forward.
  const std::uint64_t mlp = 2 * 3 * 10 * 64 * 2 + 2 * 3 * 10 * 16 * 2 + 3 * 3 * 10 * 128 * 2;
  CHECK(j["peak"]["bytes"] == kBf16Weights + cache + mlp);
}

TEST_CASE("serve hf: sliding-window layers keep their window", "[serve][hf]") {
  TempDir dir("serve-hf-sliding");
  const std::string mistral = hf_config(dir, "mistral.json", kMistral);
  const std::vector<std::string> flags = {"--prompt-len", "10", "--max-new-tokens", "5",
                                          "--batch-size", "3"};
  // DynamicSlidingWindowLayer: after the prompt the view keeps the whole cat (10 tokens); at
  // the end min(14, 8) = 8 tokens per layer.
  const Json d = hf_json(mistral, flags);
  CHECK(d["kv_cache"]["bytes"] == 3 * 8 * 2 * kKvTokenLayer);
  const std::uint64_t mlp = 2 * 3 * 10 * 64 * 2 + 2 * 3 * 10 * 16 * 2 + 3 * 3 * 10 * 128 * 2;
  CHECK(d["peak"]["bytes"] == kBf16Weights + 3 * 10 * 2 * kKvTokenLayer + mlp);
  // StaticSlidingWindowLayer: min(window, max_cache_len) = 8 tokens, allocated up front.
  auto s = flags;
  s.insert(s.end(), {"--cache-implementation", "static"});
  const Json st = hf_json(mistral, s);
  CHECK(st["kv_cache"]["bytes"] == 3 * 8 * 2 * kKvTokenLayer);
  CHECK(st["peak"]["bytes"] == kBf16Weights + 3 * 8 * 2 * kKvTokenLayer + mlp);
  // Offloaded (every layer moves to the host): after the prompt one layer of 10 tokens is on the
  // device; at the end the layer being updated and the prefetched next one, 8 tokens each.
  auto o = flags;
  o.insert(o.end(), {"--cache-implementation", "offloaded"});
  const Json off = hf_json(mistral, o);
  CHECK(off["kv_cache"]["bytes"] == 3 * (8 + 8) * kKvTokenLayer);
  CHECK(off["peak"]["bytes"] == kBf16Weights + 3 * 10 * kKvTokenLayer + mlp);
  // The host keeps each layer's view of window - 1 = 7 tokens.
  CHECK(off["notes"].dump().find("host memory") != std::string::npos);
}

TEST_CASE("serve hf: whether it fits, and --fit concurrency", "[serve][hf]") {
  TempDir dir("serve-hf-fit");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  // Batch 3 of 10 + 5 peaks at weights + 3 x 13,440 B (the prompt's cache and MLP per sequence).
  const std::uint64_t per_sequence =
      10 * 2 * kKvTokenLayer + 2 * 10 * 64 * 2 + 2 * 10 * 16 * 2 + 3 * 10 * 128 * 2;
  const std::uint64_t peak = kBf16Weights + 3 * per_sequence;
  const std::vector<std::string> base = {"serve", "--engine",     "hf", "--config",
                                         llama,   "--prompt-len", "10", "--max-new-tokens",
                                         "5",     "--batch-size", "3",  "--gpu-memory"};
  auto fits = base;
  fits.push_back(std::to_string(peak));
  CHECK(run_cli(fits).code == 0);
  auto over = base;
  over.push_back(std::to_string(peak - 1));
  const auto r = run_cli(over);
  CHECK(r.code == 1);
  CHECK(r.out.find("does not fit") != std::string::npos);
  // The largest batch within 1,000,000 bytes: (1,000,000 - weights) / 13,440 per sequence.
  const auto f = run_cli({"serve", "--engine", "hf", "--config", llama, "--prompt-len", "10",
                          "--max-new-tokens", "5", "--fit", "concurrency", "--gpu-memory",
                          "1000000", "--cache-implementation", "dynamic", "--quantization",
                          "bnb-8bit", "--format", "json"});
  REQUIRE(f.code == 0);
  const Json fit = Json::parse(f.out);
  REQUIRE(fit["rows"].size() == 1);
  CHECK(fit["searched"] == "batch_size");
  CHECK(fit["rows"][0]["at_best"]["need_bytes"] <= 1000000);
  CHECK(fit["rows"][0]["past_best"]["need_bytes"] > 1000000);
  const auto dense = run_cli({"serve", "--engine", "hf", "--config", llama, "--prompt-len", "10",
                              "--max-new-tokens", "5", "--fit", "concurrency", "--gpu-memory",
                              "1000000", "--cache-implementation", "dynamic", "--format", "json"});
  REQUIRE(dense.code == 0);
  const Json rows = Json::parse(dense.out)["rows"];
  REQUIRE(rows.size() == 3);  // bf16, bnb-8bit, bnb-4bit
  CHECK(rows[0]["best"] == (1000000 - kBf16Weights) / per_sequence);
}

TEST_CASE("serve hf: --fit context searches the prompt at the given batch and new tokens",
          "[serve][hf]") {
  TempDir dir("serve-hf-fit-context");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  const auto f = run_cli({"serve", "--engine", "hf", "--config", llama, "--max-new-tokens", "16",
                          "--batch-size", "2", "--fit", "context", "--gpu-memory", "600000",
                          "--quantization", "bnb-4bit", "--format", "json"});
  INFO(f.err);
  REQUIRE(f.code == 0);
  const Json fit = Json::parse(f.out);
  CHECK(fit["searched"] == "prompt_len");
  CHECK(fit["held"]["value"] == 16);
  CHECK(fit["also_held"]["value"] == 2);
  CHECK(fit["limit"] == 4096 - 16);  // max_position_embeddings - max_new_tokens
  REQUIRE(fit["rows"].size() == 3);  // dynamic, static, offloaded
  for (const Json& row : fit["rows"]) {
    INFO(row["kv_cache"]);
    REQUIRE(row["best"].is_number());
    CHECK(row["at_best"]["need_bytes"] <= 600000);
    CHECK(row["past_best"]["need_bytes"] > 600000);
    // The answer is the plain estimate's: that prompt fits, one token more does not.
    const auto plain = [&](std::uint64_t prompt) {
      return run_cli({"serve", "--engine", "hf", "--config", llama, "--max-new-tokens", "16",
                      "--batch-size", "2", "--gpu-memory", "600000", "--quantization", "bnb-4bit",
                      "--cache-implementation", row["kv_cache"].get<std::string>(), "--prompt-len",
                      std::to_string(prompt)})
          .code;
    };
    CHECK(plain(row["best"].get<std::uint64_t>()) == 0);
    CHECK(plain(row["best"].get<std::uint64_t>() + 1) == 1);
  }
  // The searched flag is not given as well.
  const auto both = run_cli({"serve", "--engine", "hf", "--config", llama, "--input-len", "8",
                             "--max-new-tokens", "16", "--fit", "context"});
  CHECK(both.code == 2);
  CHECK(both.err ==
        "memest: error: --prompt-len: --fit context searches it (give --max N to bound the "
        "search)\n");
}

TEST_CASE("serve hf: what it does not model or transformers refuses is one line, exit 2",
          "[serve][hf]") {
  TempDir dir("serve-hf-refused");
  const std::string llama = hf_config(dir, "llama.json", kLlama);
  const auto expect = [&](const std::string& config, std::vector<std::string> flags,
                          const std::string& line) {
    std::vector<std::string> args = {"serve", "--engine", "hf", "--config", config};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: " + line + "\n");
  };
  const std::vector<std::string> ok = {"--prompt-len", "8", "--max-new-tokens", "8"};
  auto with = [&](std::vector<std::string> extra) {
    auto f = ok;
    f.insert(f.end(), extra.begin(), extra.end());
    return f;
  };
  expect(llama, with({"--max-num-seqs", "4"}),
         "--max-num-seqs: a vLLM flag, not used by --engine hf");
  expect(llama, with({"--ctx-size", "4"}), "--ctx-size: a llama.cpp flag, not used by --engine hf");
  expect(llama, {"--max-new-tokens", "8"},
         "--prompt-len: give the prompt's tokens (input_ids' length)");
  expect(llama, {"--prompt-len", "8"}, "--max-new-tokens: give the tokens to generate");
  expect(llama, with({"--cache-implementation", "quantized"}),
         "--cache-implementation quantized: not modelled (quanto's and HQQ's packed layouts)");
  expect(llama, with({"--cache-implementation", "sliding_window"}),
         "--cache-implementation: \"sliding_window\" is not offered (expected one of: dynamic, "
         "static, offloaded, quantized)");
  expect(llama, with({"--attn-implementation", "flash_attention_2", "--dtype", "float32"}),
         "--attn-implementation flash_attention_2: runs in float16 or bfloat16 only");
  expect(llama, with({"--quantization", "fp8"}),
         "--quantization: \"fp8\" is not offered (expected one of: bnb-4bit, bnb-8bit)");
  expect(llama, with({"--input-len", "8"}),
         "--input-len: give --input-len or --prompt-len, not both");
}

// The picture's bar is what the device holds at the peak: its parts (weights, the forward's
// tensors, the cache at that moment) sum to the JSON's peak, whether it falls at the prompt's
// forward or at the last decode step, for each cache class.
TEST_CASE("serve hf: --plot's bar sums to the peak", "[serve][hf][plot]") {
  TempDir dir("serve-hf-plot");
  const std::string config = hf_config(dir, "llama.json", kLlama);
  const std::string svg = (dir.path / "hf.svg").string();
  const std::vector<std::vector<std::string>> cases = {
      {"--prompt-len", "2000", "--max-new-tokens", "2", "--batch-size", "3"},
      {"--prompt-len", "8", "--max-new-tokens", "2000", "--batch-size", "3"},
      {"--prompt-len", "100", "--max-new-tokens", "500", "--cache-implementation", "static"},
      {"--prompt-len", "100", "--max-new-tokens", "500", "--cache-implementation", "offloaded"}};
  for (const auto& flags : cases) {
    INFO(fmt::format("{}", fmt::join(flags, " ")));
    const Json j = hf_json(config, flags);
    std::vector<std::string> args = {"serve",        "--engine", "hf",     "--config", config,
                                     "--gpu-memory", "1GiB",     "--plot", svg};
    args.insert(args.end(), flags.begin(), flags.end());
    REQUIRE(run_cli(args).code == 0);
    const std::string text = memest::test::read_file(svg);
    CHECK(text.find("on transformers") != std::string::npos);
    const std::regex part("class=\"part\" data-part=\"[^\"]*\" data-bytes=\"([0-9]+)\"");
    std::uint64_t sum = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), part);
         it != std::sregex_iterator(); ++it) {
      sum += std::stoull((*it)[1].str());
    }
    CHECK(sum == j["peak"]["bytes"].get<std::uint64_t>());
  }
}
