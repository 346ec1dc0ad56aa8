// vLLM's serving memory against the start-up logs of tests/data/inference/cases.jsonl (vLLM
// 0.19.0 on H100s, llm-d-planner's sweep) with the KV budget the log printed, and against KV
// layouts derived by hand. serve_cases_test.cpp holds the logs' figures to the issue's bounds.
#include "serve_cases.hpp"
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace {

using memest::test::data_path;
using memest::test::run_cli;
using Json = nlohmann::json;

// The printed figure `what` of a case in bytes (or tokens, blocks, x).
double measured(const Json& c, const std::string& what) {
  for (const Json& m : c.at("measured")) {
    if (m.at("what") == what) return memest::serve_cases::printed_value(m);
  }
  FAIL("no measured " << what);
  return 0;
}

Json vllm_json(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  args.insert(args.end(), {"--format", "json"});
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return Json::parse(r.out);
}

double error(double predicted, double printed) { return predicted / printed - 1.0; }

}  // namespace

TEST_CASE("vLLM: the printed KV memory gives the printed tokens, blocks and concurrency",
          "[serve]") {
  // --kv-cache-memory pins the budget to what the log printed, so what remains is the KV
  // layout alone: page sizes, hybrid groups, padding layers and blocks per request. The GiB
  // printed with two decimals carries up to 5 MiB of rounding: 0.2% on 3 GiB.
  // The launch lines are tests/data/inference/runs.jsonl's (tests/serve_cases.hpp), which
  // serve_cases_test.cpp holds to the issue's bounds and docs/accuracy.md shows.
  int checked = 0;
  for (const auto& run : memest::serve_cases::load_runs(memest::test::kRoot)) {
    if (run.engine != "vllm") continue;
    INFO(run.id);
    const Json& c = run.log;
    const Json j = memest::serve_cases::estimate(
        run, {"--kv-cache-memory", fmt::format("{:.0f}", measured(c, "kv_cache_bytes"))});
    ++checked;
    CHECK(std::abs(error(j["kv_cache"]["tokens"], measured(c, "kv_cache_tokens"))) < 0.002);
    CHECK(std::abs(error(j["kv_cache"]["blocks"], measured(c, "gpu_blocks"))) < 0.002);
    CHECK(std::abs(error(j["max_concurrency"], measured(c, "max_concurrency"))) < 0.002);
  }
  CHECK(checked == 12);
}

TEST_CASE("vLLM: KV bytes per token from first principles", "[serve]") {
  SECTION("GQA: Llama-3.1-8B keeps k and v of 8 kv heads of 128 in 32 layers") {
    const Json one = vllm_json({"--model", "llama-3.1-8b", "--max-model-len", "8192"});
    CHECK(one["kv_cache"]["bytes_per_token"] == 32 * 2 * 8 * 128 * 2);
    // Two ranks hold 4 kv heads each.
    const Json two = vllm_json({"--model", "llama-3.1-8b", "--max-model-len", "8192", "--tp", "2"});
    CHECK(two["kv_cache"]["bytes_per_token"] == 32 * 2 * 4 * 128 * 2);
    // fp8 KV: one byte an element.
    const Json fp8 = vllm_json(
        {"--model", "llama-3.1-8b", "--max-model-len", "8192", "--kv-cache-dtype", "fp8"});
    CHECK(fp8["kv_cache"]["bytes_per_token"] == 32 * 2 * 8 * 128);
  }
  SECTION(
      "MLA: DeepSeek-V3 caches the 512-wide latent and the 64-wide rotary key, whole on "
      "every rank") {
    const Json j = vllm_json({"--model", "deepseek-v3", "--max-model-len", "8192", "--tp", "8",
                              "--gpu", "h200-141gb", "--quantization", "fp8"});
    CHECK(j["kv_cache"]["bytes_per_token"] == 61 * (512 + 64) * 2);
  }
  SECTION("hybrid: Gemma-3-27B's 10 global and 52 sliding layers in 7 groups of 10") {
    // 52 sliding layers fill 6 groups of 10 (8 padding slots) beside the global group: a token
    // costs 70 layer slots of 2 x 16 x 128 x 2 B; 20,967,587,840 B are 15,997 blocks of
    // 16 tokens x 10 layers x 8 KiB, and each group gets 15,997 // 7 x 16 = 36,560 tokens.
    const Json j = vllm_json({"--config", data_path("data/inference/gemma-3-27b-it.json"),
                              "--max-model-len", "8192", "--kv-cache-memory", "20967587840"});
    CHECK(j["kv_cache"]["bytes_per_token"] == 70 * 8192);
    CHECK(j["kv_cache"]["blocks"] == 15997);
    CHECK(j["kv_cache"]["tokens"] == 36560);
    // A request of 8,192 tokens needs 512 blocks of the global group and, as the window plus a
    // chunk of 8,192 covers the context, 512 + 1 of each sliding group.
    CHECK(j["max_concurrency"].get<double>() == Approx(15997.0 / (512 + 6 * 513)));
  }
}

TEST_CASE("vLLM: a longer window than the context saves nothing; a shorter chunk does", "[serve]") {
  const std::string gemma2 = data_path("data/inference/gemma-2-9b-it.json");
  const Json eight =
      vllm_json({"--config", gemma2, "--max-model-len", "8192", "--kv-cache-memory", "40GiB"});
  const Json small = vllm_json({"--config", gemma2, "--max-model-len", "8192", "--kv-cache-memory",
                                "40GiB", "--max-num-batched-tokens", "512"});
  // Same pool either way; with chunks of 512 a sliding group needs cdiv(4095 + 512, 16) + 1
  // blocks per request instead of 513.
  CHECK(eight["kv_cache"]["blocks"] == small["kv_cache"]["blocks"]);
  const double blocks = eight["kv_cache"]["blocks"];
  CHECK(eight["max_concurrency"].get<double>() == Approx(blocks / (512 + 513)));
  CHECK(small["max_concurrency"].get<double>() == Approx(blocks / (512 + 289)));
}

TEST_CASE("vLLM: a block-wise fp8 checkpoint stores an fp32 scale per 128 x 128 block", "[serve]") {
  // A small Llama (vocab 1024, hidden 256, 2 layers, 4 heads of 64, 2 kv heads, MLP 512) whose
  // quantization_config is FineGrainedFP8 with 128 x 128 blocks: every linear weight one byte a
  // value plus 4 bytes per block; the embedding, the lm_head and the norms stay bf16.
  const memest::test::TempDir dir("serve-fp8");  // one per process: ctest runs cases at once
  const auto path = dir.path / "config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
  const Json j = vllm_json({"--config", path.string(), "--kv-cache-memory", "1GiB"});
  const std::uint64_t q = 256 * 256 + 4 * (2 * 2);    // q_proj and o_proj: 2 x 2 blocks
  const std::uint64_t kv = 128 * 256 + 4 * (1 * 2);   // k_proj and v_proj: 1 x 2 blocks
  const std::uint64_t mlp = 512 * 256 + 4 * (4 * 2);  // gate, up (4 x 2) and down (2 x 4)
  const std::uint64_t layer = 2 * q + 2 * kv + 3 * mlp + 2 * 256 * 2;  // + two bf16 norms
  const std::uint64_t outer = 2 * 1024 * 256 * 2 + 256 * 2;  // embedding, lm_head, final norm
  const std::uint64_t rope = 4096 * 64 * 2;  // the rotary table: positions x head_dim in bf16
  CHECK(j["weights"]["bytes"] == 2 * layer + outer + rope);
}

namespace {

// A small Llama (vocab 1024, hidden 256, 2 layers, 4 heads of 64, 2 kv heads, MLP 512) in fp16
// with the quantization_config given, and its vLLM weights on `tp` ranks.
std::uint64_t int_quant_weights(const std::string& quant, std::vector<std::string> flags) {
  const memest::test::TempDir dir("serve-int4");  // one per process: ctest runs cases at once
  const auto path = dir.path / "config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "torch_dtype": "float16",
    "quantization_config": )"
                      << quant << "}";
  std::vector<std::string> args = {"--config", path.string(), "--kv-cache-memory", "1GiB"};
  args.insert(args.end(), flags.begin(), flags.end());
  const Json j = vllm_json(args);
  return j["weights"]["bytes"].get<std::uint64_t>();
}

// Bytes of one int4 linear layer of K inputs and N outputs with groups of 128, fp16 scales:
// packed weights K N / 2, scales (K / 128) N x 2, zero points (K / 128) N / 2 where kept, g_idx
// K x 4 per index tensor kept.
std::uint64_t int4_linear(std::uint64_t k, std::uint64_t n, bool zeros, std::uint64_t g_idx) {
  return k * n / 2 + (k / 128) * n * 2 + (zeros ? (k / 128) * n / 2 : 0) + g_idx * k * 4;
}

// The rotary table vLLM keeps beside the weights (RotaryEmbedding's cos_sin_cache):
// max_position_embeddings x head_dim in the model dtype, on every rank.
constexpr std::uint64_t kRope = 4096 * 64 * 2;

// The rest: two fp16 norms a layer; the embedding, the lm_head and the final norm; the table.
constexpr std::uint64_t kInt4Rest = 2 * (2 * 256 * 2) + 2 * 1024 * 256 * 2 + 256 * 2 + kRope;

std::uint64_t int4_model(bool zeros, std::uint64_t g_idx) {
  const std::uint64_t layer = int4_linear(256, 256, zeros, g_idx) +      // q_proj
                              2 * int4_linear(256, 128, zeros, g_idx) +  // k_proj, v_proj
                              int4_linear(256, 256, zeros, g_idx) +      // o_proj
                              2 * int4_linear(256, 512, zeros, g_idx) +  // gate, up
                              int4_linear(512, 256, zeros, g_idx);       // down
  return 2 * layer + kInt4Rest;
}

}  // namespace

TEST_CASE("vLLM: GPTQ and AWQ int4 groups as each kernel keeps them, from the shapes", "[serve]") {
  const std::string gptq =
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false, "sym": true})";
  // GPTQ-Marlin (vLLM's choice for this checkpoint): no zero points, g_idx emptied.
  CHECK(int_quant_weights(gptq, {}) == int4_model(false, 0));
  CHECK(int_quant_weights(gptq, {"--quantization", "gptq_marlin"}) == int4_model(false, 0));
  // --quantization gptq: the exllama kernel keeps the packed zero points.
  CHECK(int_quant_weights(gptq, {"--quantization", "gptq"}) == int4_model(true, 0));
  // Activation order: g_idx kept (exllama), and with Marlin its sort indices too.
  const std::string act =
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true, "sym": true})";
  CHECK(int_quant_weights(act, {}) == int4_model(false, 2));
  CHECK(int_quant_weights(act, {"--quantization", "gptq"}) == int4_model(true, 1));
  // An asymmetric GPTQ checkpoint is not Marlin's: the exllama kernel.
  const std::string asym =
      R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false, "sym": false})";
  CHECK(int_quant_weights(asym, {}) == int4_model(true, 0));
  // AWQ: zero points in both kernels (awq.py's qzeros; AWQ-Marlin's marlin_zero_points).
  const std::string awq =
      R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true})";
  CHECK(int_quant_weights(awq, {}) == int4_model(true, 0));
  CHECK(int_quant_weights(awq, {"--quantization", "awq"}) == int4_model(true, 0));
  // Two ranks: q, k, v, gate and up split their outputs, o and down their inputs (each rank's
  // groups of 128 over its 128 or 256 inputs); the embedding and lm_head half the vocabulary.
  const std::uint64_t rank_layer =
      int4_linear(256, 128, false, 0) + 2 * int4_linear(256, 64, false, 0) +
      int4_linear(128, 256, false, 0) + 2 * int4_linear(256, 256, false, 0) +
      int4_linear(256, 256, false, 0);
  CHECK(int_quant_weights(gptq, {"--tp", "2"}) ==
        2 * rank_layer + 2 * (2 * 256 * 2) + 2 * 512 * 256 * 2 + 256 * 2 + kRope);
}

// GPTQ's channelwise checkpoints (group_size -1): one group over each output's whole input, so
// one fp16 scale (and, with the exllama kernel, one packed zero) per output; Marlin takes them
// (marlin_utils.py's supported group sizes include -1). The loader refused the -1 before.
TEST_CASE("vLLM: a channelwise GPTQ checkpoint, group_size -1", "[serve]") {
  const std::string cw =
      R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": false, "sym": true})";
  const auto linear = [](std::uint64_t k, std::uint64_t n, bool zeros) {
    return k * n / 2 + n * 2 + (zeros ? n / 2 : 0);
  };
  const auto model = [&](bool zeros) {
    const std::uint64_t layer = linear(256, 256, zeros) + 2 * linear(256, 128, zeros) +
                                linear(256, 256, zeros) + 2 * linear(256, 512, zeros) +
                                linear(512, 256, zeros);
    return 2 * layer + kInt4Rest;
  };
  CHECK(int_quant_weights(cw, {}) == model(false));
  CHECK(int_quant_weights(cw, {"--quantization", "gptq"}) == model(true));
}

TEST_CASE("vLLM: --quantization gptq or awq needs that checkpoint", "[serve]") {
  const auto r = run_cli({"serve", "--model", "llama-3.1-8b", "--quantization", "gptq"});
  CHECK(r.code == 2);
  CHECK(r.err ==
        "memest: error: --quantization: gptq reads a gptq checkpoint's packed weights; the "
        "model's quantization_config is absent\n");
}

namespace {

// bitsandbytes' NF4 layout of one tensor of n elements in blocks of 64 (quantize_4bit): n / 2
// bytes of packed pairs and the 16-entry fp32 code, then either an fp32 absmax per block, or
// (double quantisation) a uint8 absmax per block, an fp32 absmax per 256 blocks, an fp32
// offset and, from a checkpoint, its own 256-entry fp32 nested code.
std::uint64_t nf4(std::uint64_t n, bool nested, bool checkpoint) {
  const std::uint64_t blocks = n / 64;
  if (!nested) return n / 2 + 16 * 4 + 4 * blocks;
  return n / 2 + 16 * 4 + blocks + 4 * (blocks / 256) + 4 + (checkpoint ? 256 * 4 : 0);
}

// The small Llama's linear weights: q and o 256 x 256, k and v 128 x 256, gate, up and down
// 512 x 256 (and 256 x 512), each sized by `linear` from its rows and elements.
template <class F>
std::uint64_t small_llama(F linear) {
  const std::uint64_t layer = 2 * linear(256, 256 * 256) + 2 * linear(128, 128 * 256) +
                              2 * linear(512, 512 * 256) + linear(256, 256 * 512);
  return 2 * layer + kInt4Rest;
}

}  // namespace

TEST_CASE("vLLM: bitsandbytes NF4 and int8 weights, bytes from shapes", "[serve]") {
  // An unquantised checkpoint with --quantization bitsandbytes: quantised as it loads, NF4 with
  // the absmax double-quantised (compress_statistics=True).
  CHECK(int_quant_weights("null", {"--quantization", "bitsandbytes"}) ==
        small_llama([](std::uint64_t, std::uint64_t n) { return nf4(n, true, false); }));
  // A 4-bit checkpoint without double quantisation: an fp32 absmax per 64.
  const std::string four =
      R"({"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"})";
  CHECK(int_quant_weights(four, {}) ==
        small_llama([](std::uint64_t, std::uint64_t n) { return nf4(n, false, false); }));
  const std::string nested =
      R"({"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4",
          "bnb_4bit_use_double_quant": true})";
  CHECK(int_quant_weights(nested, {"--quantization", "bitsandbytes"}) ==
        small_llama([](std::uint64_t, std::uint64_t n) { return nf4(n, true, true); }));
  // LLM.int8: a byte a weight and an fp32 scale (SCB) per output row.
  const std::string eight = R"({"quant_method": "bitsandbytes", "load_in_8bit": true})";
  CHECK(int_quant_weights(eight, {}) ==
        small_llama([](std::uint64_t rows, std::uint64_t n) { return n + 4 * rows; }));
  // llm_int8_skip_modules: down_proj stays fp16 (256 x 512 x 2 bytes).
  const std::string skip =
      R"({"quant_method": "bitsandbytes", "load_in_8bit": true,
          "llm_int8_skip_modules": ["down_proj"]})";
  CHECK(int_quant_weights(skip, {}) == small_llama([](std::uint64_t rows, std::uint64_t n) {
                                         return n + 4 * rows;
                                       }) + 2 * (256 * 512 * 2 - (256 * 512 + 4 * 256)));
}

TEST_CASE("vLLM: bitsandbytes refusals", "[serve]") {
  const memest::test::TempDir dir("serve-bnb");  // one per process: ctest runs cases at once
  const auto path = dir.path / "config.json";
  std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096,
    "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}})";
  // vLLM cannot split a bitsandbytes checkpoint's quant states over ranks.
  const auto tp = run_cli({"serve", "--config", path.string(), "--tp", "2"});
  CHECK(tp.code == 2);
  CHECK(tp.err.find("--tensor-parallel-size: vLLM refuses tensor parallelism") !=
        std::string::npos);
  // A quantised checkpoint of another method is not what the bitsandbytes loader reads.
  const auto fp8 = run_cli({"serve", "--model", "deepseek-v3", "--quantization", "bitsandbytes"});
  CHECK(fp8.code == 2);
  CHECK(fp8.err ==
        "memest: error: --quantization: bitsandbytes loads an unquantised or a bitsandbytes "
        "checkpoint; the model's quantization_config is fp8\n");
}

// The profile run's peak on an H100 (132 SMs, compute capability 9.0): the sampler's tensors,
// all live at once in random_sample (v1/sample/sampler.py, ops/topk_topp_sampler.py at
// 494636b29): the forward's hidden states [tokens, h], the sampled rows and their rand_like copy
// [requests, h] each, the logits [requests, vocabulary padded to 64] in bf16, their fp32 copy,
// the probabilities and the exponentials [requests, vocabulary] in fp32, and Triton's cached
// buffer of min(next_pow2(min(SMs, requests)), SMs) rows of the vocabulary in fp32; beside them
// PyTorch's cuBLAS workspace, 8 x 4 MiB on sm90 (2 x 4 MiB + 8 x 16 KiB before).
TEST_CASE("vLLM: the profile peak is the sampler's tensors and Triton's buffer", "[serve]") {
  const auto peak = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"--model", "llama-3.1-8b", "--max-model-len", "8192"});
    return vllm_json(args)["activations"]["peak_bytes"].get<std::uint64_t>();
  };
  const std::uint64_t h = 4096, vocab = 128256, mib = 1 << 20;
  const auto sampler = [&](std::uint64_t tokens, std::uint64_t requests, std::uint64_t rows) {
    return tokens * h * 2 + 2 * requests * h * 2 + requests * vocab * 2 + requests * vocab * 12 +
           rows * vocab * 4;
  };
  // The server's defaults: 8,192 tokens over 1,024 requests, 132 programs and buffer rows.
  CHECK(peak({}) == sampler(8192, 1024, 132) + 32 * mib);
  // 100 requests (and 1,024 tokens, so that the sampler stays the larger peak): 100 programs,
  // a buffer of next_pow2(100) = 128 rows.
  CHECK(peak({"--max-num-seqs", "100", "--max-num-batched-tokens", "1024"}) ==
        sampler(1024, 100, 128) + 32 * mib);
  // An A100 (108 SMs, sm80): 108 rows, the smaller workspace.
  CHECK(peak({"--gpu", "a100-80gb"}) == sampler(8192, 1024, 108) + 8 * mib + 128 * 1024);
  // --gpu-memory states the total only: the preset's SMs stay (h100-80gb's by default).
  CHECK(peak({"--gpu-memory", "79.19GiB"}) == peak({}));
}

// profile_run's encoder pass keeps max_mm_items_per_batch dummy images and their embeddings
// through the sampler (MultiModalBudget._get_max_items): Gemma-3-27B's multimodal checkpoint,
// per image 3 x 896 x 896 pixels and 256 embeddings of 5,376, in bf16, beside the sampler's
// peak above (262,208 is a multiple of 64) and the cuBLAS workspace.
TEST_CASE("vLLM: a multimodal model's profile peak holds the encoder pass's images", "[serve]") {
  const std::string config = data_path("data/inference/gemma-3-27b-it.json");
  const auto peak = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--config", config});
    return vllm_json(args)["activations"]["peak_bytes"].get<std::uint64_t>();
  };
  const std::uint64_t h = 5376, vocab = 262208, workspace = 32 << 20;
  const std::uint64_t image = (3 * 896 * 896 + 256 * h) * 2;
  const auto sampler = [&](std::uint64_t tokens, std::uint64_t requests) {
    return tokens * h * 2 + 2 * requests * h * 2 + requests * vocab * 2 + requests * vocab * 12 +
           132 * vocab * 4 + workspace;
  };
  // The server's defaults (8,192 batched tokens, 1,024 sequences): 8,192 / 256 = 32 images.
  CHECK(peak({"--max-model-len", "8192"}) == sampler(8192, 1024) + 32 * image);
  // A smaller encoder budget: 2,048 / 256 = 8 images (2,048 requests' worth of tokens).
  CHECK(peak({"--max-model-len", "8192", "--max-num-batched-tokens", "2048"}) ==
        sampler(2048, 1024) + 8 * image);
  // One sequence of 600 tokens holds 2 images (600 / 256): the decoder's bound, not the 32. The
  // forward is the larger peak then (its MLP: gate_up and SiluAndMul's output of 21,504 beside
  // the residual and the input, over the 8,192 tokens), and the images add to it.
  CHECK(peak({"--max-model-len", "600", "--max-num-seqs", "1"}) ==
        2 * 8192 * h * 2 + 8192 * 3 * 21504 * 2 + workspace + 2 * image);
  // A text-only model keeps no images: Gemma-2-9B (3,584 wide, 256,000 entries) is the sampler.
  const std::uint64_t h2 = 3584, v2 = 256000;
  CHECK(vllm_json({"--config", data_path("data/inference/gemma-2-9b-it.json"), "--max-model-len",
                   "8192"})["activations"]["peak_bytes"] == 8192 * h2 * 2 + 2 * 1024 * h2 * 2 +
                                                                1024 * v2 * 2 + 1024 * v2 * 12 +
                                                                132 * v2 * 4 + workspace);
}
