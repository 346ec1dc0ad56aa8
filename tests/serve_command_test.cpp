// `memest serve` on the command line: its table, its JSON keys and its one-line refusals.
#include "testutil.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using memest::test::run_cli;

TEST_CASE("serve: the JSON has the per-device keys", "[serve]") {
  const auto r =
      run_cli({"serve", "--model", "llama-3.1-8b", "--max-model-len", "8192", "--format", "json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"/weights/bytes", "/kv_cache/bytes_per_token", "/kv_cache/bytes",
                          "/kv_cache/tokens", "/kv_cache/blocks", "/activations/peak_bytes",
                          "/non_torch/bytes", "/cuda_graphs/bytes", "/max_concurrency"}) {
    INFO(key);
    CHECK(j.contains(nlohmann::json::json_pointer(key)));
  }
  CHECK(j["engine"] == "vllm");
  // Weights, peak, non-torch memory and the KV cache fill the budget to less than a block row.
  const std::uint64_t h100 = 81'559ULL << 20;
  const auto used = j["weights"]["bytes"].get<std::uint64_t>() +
                    j["activations"]["peak_bytes"].get<std::uint64_t>() +
                    j["non_torch"]["bytes"].get<std::uint64_t>() +
                    j["kv_cache"]["bytes"].get<std::uint64_t>();
  const auto budget = static_cast<std::uint64_t>(0.9 * static_cast<double>(h100));
  CHECK(used <= budget);
  CHECK(budget - used < 16 * 131072);
  // --enforce-eager: no CUDA graphs at all.
  const auto eager = run_cli({"serve", "--model", "llama-3.1-8b", "--max-model-len", "8192",
                              "--enforce-eager", "--format", "json"});
  CHECK(nlohmann::json::parse(eager.out)["cuda_graphs"]["bytes"] == 0);
}

TEST_CASE("serve: the table names each part with its basis", "[serve]") {
  const auto r = run_cli({"serve", "--model", "qwen3-8b", "--max-model-len", "8192",
                          "--gpu-memory-utilization", "0.95"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("model      qwen3-8b (vllm, 1 device; figures per device)") == 0);
  for (const char* part : {"weights", "activation peak", "non-torch", "KV cache", "KV per token",
                           "KV tokens", "max concurrency", "CUDA graphs"}) {
    INFO(part);
    CHECK(r.out.find(std::string("\n") + part) != std::string::npos);
  }
}

TEST_CASE("serve: the CUDA-graph row names the batch sizes vLLM captures", "[serve]") {
  const auto row = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"serve", "--model", "llama-3.1-8b", "--max-model-len", "8192"});
    const auto r = run_cli(args);
    REQUIRE(r.code == 0);
    const auto at = r.out.find("\nCUDA graphs");
    REQUIRE(at != std::string::npos);
    return r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  };
  // The server's defaults on an 80 GB device (max_num_seqs 1024): 51 sizes up to 512.
  CHECK(row({}).find("51 batch sizes, 1 to 512, captured after the KV cache") != std::string::npos);
  // 100 sequences: the largest is 200, every 8 from 8 on.
  CHECK(row({"--max-num-seqs", "100"}).find("28 batch sizes, 1 to 200") != std::string::npos);
  // A batch of 128 tokens caps it.
  CHECK(row({"--max-num-batched-tokens", "128"}).find("19 batch sizes, 1 to 128") !=
        std::string::npos);
  CHECK(row({"--enforce-eager"}).find("--enforce-eager") != std::string::npos);
}

TEST_CASE("serve: bad input is one line and exit 2", "[serve]") {
  const auto expect = [](std::vector<std::string> args, const std::string& line) {
    args.insert(args.begin(), "serve");
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: " + line + "\n");
  };
  expect({"--model", "llama-3.1-8b", "--ctx-size", "4096"},
         "--ctx-size: a llama.cpp flag, not used by --engine vllm");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--max-num-seqs", "8"},
         "--max-num-seqs: a vLLM flag, not used by --engine llama.cpp");
  expect({"--model", "llama-3.1-8b", "--kv-cache-dtype", "q8_0"},
         "--kv-cache-dtype: \"q8_0\" is not offered (expected one of: auto, fp8, fp8_e4m3, "
         "fp8_e5m2)");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--cache-type-k", "q3_k"},
         "--cache-type-k: unknown cache type \"q3_k\" (expected one of: f32, f16, bf16, q8_0, "
         "q4_0, q4_1, q5_0, q5_1, iq4_nl)");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--cache-type-v", "q8_0"},
         "--cache-type-v: q8_0 needs --flash-attn (llama.cpp quantises V only with flash "
         "attention)");
  expect({"--engine", "tgi", "--model", "llama-3.1-8b"},
         "--engine: \"tgi\" is not offered (expected one of: vllm, llama.cpp, sglang, hf)");
  expect({"--model", "llama-3.1-8b", "--gpu-memory-utilization", "1.5"},
         "--gpu-memory-utilization: expected a fraction in (0, 1], got \"1.5\"");
  expect({"--model", "llama-3-70b", "--gpu", "a10"},
         "serve: no memory left for the KV cache: weights 131.42 GiB + profile peak 0.51 GiB + "
         "non-torch 0.25 GiB exceed gpu_memory_utilization x total = 20.24 GiB (try more "
         "--tensor-parallel-size, a higher --gpu-memory-utilization or --quantization fp8)");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--quantization", "Q4_K_X"},
         "--quantization: unknown GGUF file type \"Q4_K_X\" (expected one of: F16, BF16, Q8_0, "
         "Q4_0, Q5_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, IQ4_XS)");
  expect({"--model", "llama-3.1-8b", "--quantization", "Q4_K_M"},
         "--quantization: \"Q4_K_M\" is not offered (expected one of: fp8, compressed-tensors, "
         "gptq, gptq_marlin, awq, awq_marlin, bitsandbytes)");
  expect({"--engine", "llama.cpp", "--model", "mixtral-8x7b", "--quantizer", "2023-12"},
         "--quantizer: the rules of the quantizer type a --quantization file type; give one (a "
         "--gguf file has its own types)");
  expect({"--engine", "llama.cpp", "--model", "mixtral-8x7b", "--quantization", "Q4_K_M",
          "--quantizer", "2024"},
         "--quantizer: \"2024\" is not offered (expected one of: current, 2023-12)");
  expect({"--model", "deepseek-v3", "--fused-moe"},
         "--fused-moe: a llama.cpp flag, not used by --engine vllm");
  expect({"--model", "deepseek-v3", "--attention-max-batch", "512"},
         "--attention-max-batch: a llama.cpp flag, not used by --engine vllm");
  expect({"--engine", "llama.cpp", "--model", "deepseek-v3", "--attention-max-batch", "0"},
         "--attention-max-batch: count must be positive, got \"0\" (expected a positive whole "
         "count such as 7B, 6.7B, 125M, 1.3e9 or 6738415616)");
  const std::vector<std::string> q8 = {"--engine",       "llama.cpp", "--model",   "llama-3.1-8b",
                                       "--quantization", "Q8_0",      "--custom-q"};
  const auto custom = [&](const char* rules) {
    auto args = q8;
    args.emplace_back(rules);
    return args;
  };
  expect(custom("ffn_down=iq9_k"),
         "--custom-q: \"ffn_down=iq9_k\": unknown ggml type (expected one of: q4_0, q4_1, q5_0, "
         "q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, iq2_k, iq3_k, iq4_k, iq5_k, "
         "iq6_k)");
  expect(custom("ffn_down"), "--custom-q: expected REGEX=TYPE, got \"ffn_down\"");
  expect(custom("ffn_(down=q8_0"),
         "--custom-q: \"ffn_(down\" is not a regular expression (Mismatched '(' and ')' in regular "
         "expression)");
  expect(custom("(a+)+=q8_0"),
         "--custom-q: \"(a+)+\" repeats a group that repeats (std::regex would take exponential "
         "time)");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--custom-q", "ffn_down=q8_0"},
         "--custom-q: the rules refine a --quantization file type's; give one (a --gguf file has "
         "its own types)");
  expect({"--engine", "llama.cpp", "--model", "qwen2.5-0.5b", "--quantization", "Q8_0",
          "--custom-q", "attn_q=q6_K"},
         "--custom-q: blk.0.attn_q.weight has rows of 896 elements, not whole 256-element blocks "
         "of q6_K");
  expect({"--model", "mamba-2.8b", "--max-model-len", "2048"},
         "serve: model preset \"mamba-2.8b\": a state-space model has no attention KV cache (its "
         "recurrent state is not modelled)");
  expect({"--config", "/nonexistent/config.json"},
         "/nonexistent/config.json: cannot open file: No such file or directory");
  expect({"--max-model-len", "8192"},
         "serve: give the model as --model NAME or --config PATH (one of them)");
  expect({"--model", "llama-3.1-8b", "--max-modle-len", "8192"},
         "serve: unknown flag \"--max-modle-len\" (did you mean \"--max-model-len\"?) (see memest "
         "serve --help)");
}

TEST_CASE("serve: help lists each engine's flags", "[serve]") {
  const auto r = run_cli({"serve", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--max-model-len N") != std::string::npos);
  CHECK(r.out.find("[llama.cpp] f16, q8_0") != std::string::npos);
  // Given after training options, serve says where it goes.
  const auto late = run_cli({"--model", "llama-3.1-8b", "serve"});
  CHECK(late.code == 2);
}

TEST_CASE("serve: vLLM refuses to start when one request does not fit, and says how long fits",
          "[serve]") {
  // Llama-3-70B on two A100 80GB leaves about 2.4 GiB of KV cache per rank: far less than one
  // request of 131,072 tokens. vLLM's check sums every layer's need for one request; with full
  // attention only that is a whole number of blocks per layer, so the longest max_model_len
  // that fits is the cache's own token count.
  const auto r = run_cli({"serve", "--model", "llama-3-70b", "--tp", "2", "--gpu", "a100-80gb",
                          "--max-model-len", "131072", "--format", "json"});
  CHECK(r.code == 1);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["fits"] == false);
  CHECK(j["largest_max_model_len"] == j["kv_cache"]["tokens"]);
  const auto table = run_cli({"serve", "--model", "llama-3-70b", "--tp", "2", "--gpu", "a100-80gb",
                              "--max-model-len", "131072"});
  CHECK(table.code == 1);
  CHECK(table.out.find("does not start: one request of 131,072 tokens") != std::string::npos);
  // A length that fits starts.
  const auto ok = run_cli({"serve", "--model", "llama-3-70b", "--tp", "2", "--gpu", "a100-80gb",
                           "--max-model-len", "8192", "--format", "json"});
  CHECK(ok.code == 0);
  CHECK(nlohmann::json::parse(ok.out)["fits"] == true);
}
