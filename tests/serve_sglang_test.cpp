// SGLang's pools derived by hand from its source (no SGLang logs are kept): a small GQA model,
// an fp8 KV cache, MLA, the SWA split, the page size, the default mem_fraction_static by GPU
// memory and TP, and the refusals of the other engines' flags.
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace {

using memest::test::run_cli;
using Json = nlohmann::json;

constexpr double kGiB = 1ULL << 30;

// A small Llama in bf16: vocab 1024, hidden 256, 2 layers, 4 heads of 64, 2 kv heads, MLP 512,
// untied embeddings, 4096 positions. Its weights: per layer q and o 256 x 256, k and v 128 x
// 256, gate, up and down 512 x 256, two norms of 256; the embedding and lm_head 1024 x 256 and
// the final norm; two bytes each.
constexpr std::uint64_t kSmallLayer = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256 + 2 * 256;
constexpr std::uint64_t kSmallWeights = 2 * (2 * kSmallLayer + 2 * 1024 * 256 + 256);

struct SmallModel {
  memest::test::TempDir dir{"serve-sglang"};  // one per process: ctest runs cases at once
  std::string path = (dir.path / "config.json").string();
  SmallModel() {
    std::ofstream(path) << R"({"model_type": "llama", "vocab_size": 1024, "hidden_size": 256,
      "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"})";
  }
};

Json sglang_json(std::vector<std::string> args) {
  args.insert(args.begin(), {"serve", "--engine", "sglang"});
  return memest::test::run_json(args);
}

// profile_max_num_token as model_runner_kv_cache_mixin.py writes it: (available - total x (1 -
// fraction)) in GiB, back to bytes, divided by the cell.
std::uint64_t profiled(double total, double weights, double fraction, std::uint64_t cell) {
  const double rest = (total - weights) / kGiB - total / kGiB * (1.0 - fraction);
  return static_cast<std::uint64_t>(rest * kGiB) / cell;
}

}  // namespace

TEST_CASE("SGLang: a GQA model's pool, request pool and running requests", "[serve][sglang]") {
  const SmallModel m;
  const Json j =
      sglang_json({"--config", m.path, "--gpu-memory", "1GiB", "--mem-fraction-static", "0.5"});
  CHECK(j["engine"] == "sglang");
  CHECK(j["weights"]["bytes"] == kSmallWeights);
  // Per token: 2 kv heads x 64 x (k and v) x 2 bytes x 2 layers.
  const std::uint64_t cell = 2 * 64 * 2 * 2 * 2;
  CHECK(j["kv_cache"]["bytes_per_token"] == cell);
  // 2^29 - weights bytes left: 533,460,480 / 1024.
  const std::uint64_t tokens = ((1ULL << 29) - kSmallWeights) / cell;
  CHECK(tokens == profiled(kGiB, kSmallWeights, 0.5, cell));
  CHECK(j["kv_cache"]["tokens"] == tokens);
  CHECK(j["kv_cache"]["bytes"] == (tokens + 1) * cell);  // the padded page 0 (page size 1)
  // The request pool: min(max(tokens / 4096 x 512, 2048), 4096) = 4096 requests of 4096 + 4
  // int32 slots; max_running_requests = min(tokens / 2, 4096).
  CHECK(j["request_pool"]["requests"] == 4096);
  CHECK(j["request_pool"]["bytes"] == 4096ULL * (4096 + 4) * 4);
  CHECK(j["request_pool"]["max_running_requests"] == 4096);
  CHECK(j["max_concurrency"] == 4096.0);
  CHECK(j["cuda_graphs"]["bytes"].is_null());
  CHECK(j["inputs"]["engine"] == "sglang");
}

TEST_CASE("SGLang: an fp8 KV cache, the page size and the caps", "[serve][sglang]") {
  const SmallModel m;
  const std::vector<std::string> base = {
      "--config", m.path, "--gpu-memory", "1GiB", "--mem-fraction-static", "0.5"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return sglang_json(args);
  };
  const std::uint64_t left = (1ULL << 29) - kSmallWeights;
  for (const char* fp8 : {"fp8_e4m3", "fp8_e5m2"}) {
    const Json j = with({"--kv-cache-dtype", fp8});
    CHECK(j["kv_cache"]["bytes_per_token"] == 512);
    CHECK(j["kv_cache"]["tokens"] == left / 512);
  }
  const Json paged = with({"--page-size", "64"});
  const std::uint64_t paged_tokens = left / 1024 / 64 * 64;
  CHECK(paged["kv_cache"]["tokens"] == paged_tokens);
  CHECK(paged["kv_cache"]["bytes"] == (paged_tokens + 64) * 1024);
  // --max-total-tokens caps the pool; the request pool is sized from the profile before it.
  const Json capped = with({"--max-total-tokens", "10000", "--context-length", "1024"});
  CHECK(capped["kv_cache"]["tokens"] == 10000);
  CHECK(capped["request_pool"]["requests"] == 4096);  // 520,957 / 1024 x 512 is over 4096
  CHECK(capped["request_pool"]["max_running_requests"] == 4096);
  const Json few = with({"--max-total-tokens", "3000"});
  CHECK(few["request_pool"]["max_running_requests"] == 1500);  // tokens / 2
  const Json given = with({"--max-running-requests", "48", "--disable-cuda-graph"});
  CHECK(given["request_pool"]["requests"] == 48);
  CHECK(given["request_pool"]["bytes"] == 48ULL * (4096 + 4) * 4);
  CHECK(given["max_concurrency"] == 48.0);
  CHECK(given["cuda_graphs"]["bytes"] == 0);
}

TEST_CASE("SGLang: MLA caches the latent and rotary key whole on every rank", "[serve][sglang]") {
  // DeepSeek-V2-Lite: kv_lora_rank 512 + qk_rope_head_dim 64, 27 layers, bf16.
  const std::uint64_t cell = (512 + 64) * 2 * 27;
  for (const char* tp : {"1", "2"}) {
    INFO("tp " << tp);
    const Json j = sglang_json({"--model", "deepseek-v2-lite", "--gpu-memory", "80GiB", "--tp", tp,
                                "--context-length", "8192"});
    CHECK(j["kv_cache"]["bytes_per_token"] == cell);
    const double weights = j["weights"]["bytes"].get<double>();
    const double fraction = std::string(tp) == "1" ? 0.836 : 0.834;
    CHECK(j["kv_cache"]["tokens"] == profiled(80 * kGiB, weights, fraction, cell));
  }
  const Json fp8 = sglang_json({"--model", "deepseek-v2-lite", "--gpu-memory", "80GiB",
                                "--kv-cache-dtype", "fp8_e4m3", "--context-length", "8192"});
  CHECK(fp8["kv_cache"]["bytes_per_token"] == cell / 2);
}

TEST_CASE("SGLang: a hybrid SWA model's pool is split by swa_full_tokens_ratio",
          "[serve][sglang]") {
  // gpt-oss-20b: 24 layers alternating sliding (window 128) and full, 8 kv heads of 64.
  const Json j = sglang_json({"--model", "gpt-oss-20b", "--gpu-memory", "80GiB",
                              "--mem-fraction-static", "0.8", "--context-length", "8192"});
  const std::uint64_t per_layer = 8 * 64 * 2 * 2;
  CHECK(j["kv_cache"]["bytes_per_token"] == per_layer * 24);
  const std::uint64_t all =
      profiled(80 * kGiB, j["weights"]["bytes"].get<double>(), 0.8, per_layer * 24);
  // full x F x 12 + 0.8 x full x F x 12 = all x F x 24.
  const double f = per_layer;
  const auto full = static_cast<std::uint64_t>(static_cast<double>(all) * (f * 12 + f * 12) /
                                               (f * 12 + 0.8 * f * 12));
  const auto swa = static_cast<std::uint64_t>(static_cast<double>(full) * 0.8);
  CHECK(j["kv_cache"]["tokens"] == full);
  CHECK(j["kv_cache"]["swa_tokens"] == swa);
  CHECK(j["kv_cache"]["bytes"] == ((full + 1) * 12 + (swa + 1) * 12) * per_layer);
  // Gemma-2 slides too, but SGLang keeps one pool for every layer there.
  const Json gemma = sglang_json({"--model", "gemma-2-2b", "--gpu-memory", "80GiB"});
  CHECK_FALSE(gemma["kv_cache"].contains("swa_tokens"));
}

TEST_CASE("SGLang: mem_fraction_static's default by GPU memory and TP", "[serve][sglang]") {
  // reserved MiB = 512 + max(chunked prefill, 2048) x 1.5 + cuda_graph_max_bs x 2 + tp / 8 x
  // 1024, at least 10 GiB above 60 GiB; the fraction (total - reserved) / total to 3 decimals.
  struct Case {
    std::uint64_t gib, tp;
    double fraction;
  };
  for (const Case c : {Case{24, 1, (24576 - 3760.0) / 24576},   // chunk 2048, 24 graphs
                       Case{40, 1, (40960 - 6848.0) / 40960},   // chunk 4096, 32 graphs
                       Case{80, 1, (81920 - 13440.0) / 81920},  // chunk 8192, 256 graphs
                       Case{80, 4, (81920 - 14336.0) / 81920},  // 512 graphs under TP 4
                       Case{141, 1, (144384 - 13440.0) / 144384},
                       Case{192, 8, (196608 - 27136.0) / 196608}}) {  // chunk 16384, 512
    INFO(c.gib << " GiB, tp " << c.tp);
    memest::SglangSettings s;
    s.total_memory = c.gib << 30;
    s.tp_size = c.tp;
    const auto d = memest::sglang_memory_defaults(s);
    CHECK(d.mem_fraction_static == Approx(std::round(c.fraction * 1000) / 1000).margin(1e-12));
    const auto r =
        run_cli({"serve", "--engine", "sglang", "--model", "llama-3.1-8b", "--gpu-memory",
                 fmt::format("{}GiB", c.gib), "--tp", std::to_string(c.tp)});
    CHECK(r.out.find(fmt::format("mem_fraction_static {} x total", d.mem_fraction_static)) !=
          std::string::npos);
  }
  memest::SglangSettings small;
  small.total_memory = 16ULL << 30;
  small.chunked_prefill_size = 8192;
  const auto d = memest::sglang_memory_defaults(small);
  CHECK(d.cuda_graph_max_bs == 8);
  CHECK(d.reserved_mib == 512 + 8192 * 1.5 + 8 * 2 + 128);
}

TEST_CASE("SGLang: --fit searches --context-length and --max-running-requests", "[serve][sglang]") {
  const SmallModel m;
  const Json plain = sglang_json({"--config", m.path, "--gpu-memory", "1GiB",
                                  "--mem-fraction-static", "0.5", "--context-length", "4096"});
  const std::uint64_t tokens = plain["kv_cache"]["tokens"];
  const Json fit = sglang_json({"--config", m.path, "--gpu-memory", "1GiB", "--mem-fraction-static",
                                "0.5", "--context-length", "4096", "--kv-cache-dtype", "auto",
                                "--quantization", "fp8", "--fit", "concurrency"});
  CHECK(fit["searched"] == "max_running_requests");
  REQUIRE(fit["rows"].size() == 1);
  const std::uint64_t fp8_tokens = fit["rows"][0]["at_best"]["kv_cache"]["tokens"];
  CHECK(fp8_tokens > tokens);  // fp8 weights leave more for the pool
  CHECK(fit["rows"][0]["best"] == fp8_tokens / 4096);
  const Json context = sglang_json({"--config", m.path, "--gpu-memory", "1GiB",
                                    "--mem-fraction-static", "0.5", "--fit", "context"});
  CHECK(context["searched"] == "context_length");
  CHECK(context["rows"].size() == 4);  // bf16 and fp8 weights by auto and fp8_e4m3 KV
  for (const Json& row : context["rows"]) CHECK(row["best"] == 4096);  // the model's positions
}

TEST_CASE("SGLang: other engines' flags and names are one line, exit 2", "[serve][sglang]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-model-len", "100"}, "--max-model-len: a vLLM flag, not used by --engine sglang"},
      {{"--ctx-size", "100"}, "--ctx-size: a llama.cpp flag, not used by --engine sglang"},
      {{"--enforce-eager"}, "--enforce-eager: a vLLM flag, not used by --engine sglang"},
      {{"--kv-cache-dtype", "fp8"},
       "--kv-cache-dtype: \"fp8\" is not offered (expected one of: auto, fp8_e5m2, fp8_e4m3)"},
      {{"--context-length", "200000"},
       "--context-length: SGLang refuses 200000 above the model's max_position_embeddings 131072 "
       "(model_config.py, unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set)"},
      {{"--tp", "2", "--tp-size", "2"}, "--tp-size: give one of --tp, --tp-size, not both"}};
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {"serve", "--engine", "sglang", "--model", "llama-3.1-8b"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: " + message + "\n");
  }
  const auto vllm = run_cli({"serve", "--model", "llama-3.1-8b", "--context-length", "100"});
  CHECK(vllm.code == 2);
  CHECK(vllm.err == "memest: error: --context-length: a SGLang flag, not used by --engine vllm\n");
  const auto tight =
      run_cli({"serve", "--engine", "sglang", "--model", "llama-3.1-8b", "--gpu-memory", "16GiB"});
  CHECK(tight.code == 2);
  CHECK(tight.err.find("Not enough memory") != std::string::npos);
  // SGLang's default fraction on a small GPU is negative: it reserves more than there is.
  const auto tiny =
      run_cli({"serve", "--engine", "sglang", "--model", "llama-3.2-1b", "--gpu-memory", "2GiB"});
  CHECK(tiny.code == 2);
  CHECK(tiny.err.find("--mem-fraction-static: SGLang's default is -0.82 on 2.00 GiB (it reserves "
                      "3728 MiB); give one") != std::string::npos);
}

TEST_CASE("SGLang: a flag replaces every spelling of it in a run config", "[serve][sglang]") {
  const memest::test::TempDir dir("serve-sglang-file");  // one per process
  const auto path = (dir.path / "run.json").string();
  std::ofstream(path) << R"({"model": "llama-3.1-8b", "engine": "sglang", "tp": 2,
    "context_length": 8192})";
  const Json from_file = memest::test::run_json({"serve", "--file", path});
  CHECK(from_file["devices"] == 2);
  for (const char* flag : {"--tp-size", "--tensor-parallel-size", "--tp"}) {
    INFO(flag);
    const Json j = memest::test::run_json({"serve", "--file", path, flag, "4"});
    CHECK(j["devices"] == 4);
  }
}
