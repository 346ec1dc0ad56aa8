// Serve run configs (memest serve --file): every key of the table is read as its flag would be,
// a file and the same flags give the same output, flags override the file, bad files are one
// line and exit 2, and the shipped JSON Schema is the one the table generates.
#include "testutil.hpp"

#include <memest/serve_config.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace memest;
using memest::test::run_cli;
using memest::test::TempDir;

namespace {

std::string serve_write(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir.path / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A JSON value of the row's kind and the text its flag takes for it.
std::pair<nlohmann::json, std::string> serve_config_sample(const ServeOptionInfo& f) {
  switch (f.kind) {
    case ValueKind::flag:
      return {true, ""};
    case ValueKind::count:
      return {3, "3"};
    case ValueKind::size:
      return {4000000000ULL, "4000000000"};
    case ValueKind::fraction:
      return {0.5, "0.5"};
    case ValueKind::path:
      return {"/abs/file", "/abs/file"};
    case ValueKind::text:
      return {"3,1", "3,1"};
    default: {
      const std::string n(serve_choices(f, ServeEngine::vllm).back());
      return {n, n};
    }
  }
}

}  // namespace

TEST_CASE("serve config: every key is read as its flag, named by file and pointer",
          "[serve][config]") {
  TempDir dir("serve-config-keys");
  nlohmann::json doc = {{"$schema", "serve.schema.json"}, {"description", "all keys"}};
  std::map<std::string, std::string> expected;
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (!f.config_key) continue;
    const auto [value, text] = serve_config_sample(f);
    doc[serve_config_key(f.flag)] = value;
    expected[f.flag] = text;
  }
  const std::string path = serve_write(dir, "all.json", doc.dump());
  const ServeValues got = load_serve_config(path);
  REQUIRE(got.size() == expected.size());
  for (const auto& [flag, text] : expected) {
    INFO(flag);
    REQUIRE(got.contains(flag));
    CHECK(got.at(flag).text == text);
    CHECK(got.at(flag).where == path + ": /" + serve_config_key(flag));
  }
  // A switch given false is not given; the output and the question are not keys.
  const std::string off = serve_write(dir, "off.json", R"({"enforce_eager": false})");
  CHECK(load_serve_config(off).empty());
  const std::string format = serve_write(dir, "format.json", R"({"format": "json"})");
  CHECK_THROWS_WITH(load_serve_config(format),
                    Catch::StartsWith(format + ": /format: unknown key"));
}

TEST_CASE("serve config: a file and the same flags give the same output", "[serve][config]") {
  TempDir dir("serve-config-same");
  // A config.json beside the run config, named relative to it.
  serve_write(dir, "config.json", memest::test::read_file("configs/models/qwen3-8b.json"));
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {R"({"model": "llama-3.1-8b", "max_model_len": "8192", "kv_cache_dtype": "fp8",
          "gpu": "a100-80gb", "enforce_eager": true})",
       {"--model", "llama-3.1-8b", "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--gpu",
        "a100-80gb", "--enforce-eager"}},
      {R"({"config": "config.json", "engine": "llama.cpp", "ctx_size": 16384, "parallel": 4,
          "cache_type_k": "q8_0", "cache_type_v": "q8_0", "flash_attn": true,
          "quantization": "Q4_K_M"})",
       {"--config", (dir.path / "config.json").string(), "--engine", "llama.cpp", "--ctx-size",
        "16384", "--parallel", "4", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0",
        "--flash-attn", "--quantization", "Q4_K_M"}},
      {R"({"model": "llama-3.1-8b", "engine": "hf", "input_len": 2048, "max_new_tokens": 256,
          "batch_size": 4, "dtype": "float16", "attn_implementation": "eager",
          "cache_implementation": "static"})",
       {"--model", "llama-3.1-8b", "--engine", "hf", "--input-len", "2048", "--max-new-tokens",
        "256", "--batch-size", "4", "--dtype", "float16", "--attn-implementation", "eager",
        "--cache-implementation", "static"}},
  };
  int i = 0;
  for (const auto& [text, flags] : cases) {
    const std::string path = serve_write(dir, fmt::format("run{}.json", i++), text);
    std::vector<std::string> args = {"serve"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto by_flags = run_cli(args);
    const auto by_file = run_cli({"serve", "--file", path});
    INFO(text << by_flags.err << by_file.err);
    REQUIRE(by_flags.code == 0);
    CHECK(by_file.code == by_flags.code);
    CHECK(by_file.out == by_flags.out);
  }
}

TEST_CASE("serve config: flags override the file, its other spellings included",
          "[serve][config]") {
  TempDir dir("serve-config-override");
  const std::string path =
      serve_write(dir, "run.json", R"({"model": "llama-3.1-8b", "tp": 2, "max_model_len": 4096})");
  const auto result = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"serve", "--file", path, "--format", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    INFO(r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  CHECK(result({})["devices"] == 2);
  CHECK(result({})["context"] == 4096);
  CHECK(result({"--tensor-parallel-size", "4"})["devices"] == 4);
  CHECK(result({"--max-model-len", "2048"})["context"] == 2048);
  CHECK(result({"--model", "qwen3-8b"})["model"] == "qwen3-8b");
}

TEST_CASE("serve config: a bad file is one line and exit 2", "[serve][config]") {
  TempDir dir("serve-config-bad");
  const auto expect = [&](const std::string& text, const std::string& problem) {
    const std::string path = serve_write(dir, "bad.json", text);
    const auto r = run_cli({"serve", "--file", path});
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: " + path + ": " + problem + "\n");
  };
  expect(R"({"model": "llama-3.1-8b", "max_modle_len": 8})",
         "/max_modle_len: unknown key (did you mean \"max_model_len\"?)");
  expect(R"({"model": "llama-3.1-8b", "ctx_size": 8})",
         "/ctx_size: a llama.cpp flag, not used by --engine vllm");
  expect(R"({"model": "llama-3.1-8b", "engine": "llama.cpp", "block_size": 32})",
         "/block_size: a vLLM flag, not used by --engine llama.cpp");
  expect(R"({"model": "llama-3.1-8b", "kv_cache_dtype": "q8_0"})",
         "/kv_cache_dtype: \"q8_0\" is not offered (expected one of: auto, fp8, fp8_e4m3, "
         "fp8_e5m2)");
  expect(R"({"model": "llama-3.1-8b", "engine": "hf", "max_model_len": 8})",
         "/max_model_len: a vLLM flag, not used by --engine hf");
  expect(R"({"model": "llama-3.1-8b", "engine": "hf", "dtype": "fp16"})",
         "/dtype: \"fp16\" is not offered (expected one of: auto, bfloat16, float16, float32)");
  expect(R"({"model": "llama-3.1-8b", "enforce_eager": "yes"})",
         "/enforce_eager: expected true or false, got string \"yes\"");
  expect(R"({"model": "llama-3.1-8b", "gpu_memory_utilization": 2})",
         "/gpu_memory_utilization: expected a fraction in (0, 1], got \"2\"");
  expect(R"(["llama-3.1-8b"])", "/: expected an object, got an array");
}

TEST_CASE("serve config: the shipped JSON Schema is the one the table generates",
          "[serve][config][schema]") {
  const auto r = run_cli({"schema", "--serve"});
  REQUIRE(r.code == 0);
  CHECK(r.out == serve_config_schema());
  const std::string path = memest::test::kRoot + "/configs/schema/serve.schema.json";
  if (const char* u = std::getenv("MEMEST_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << r.out;
  }
  REQUIRE(r.out == memest::test::read_file(path));
  // Every choice is an enum of the table's names.
  const auto schema = nlohmann::json::parse(r.out);
  const auto& p = schema["properties"];
  CHECK(p["engine"]["enum"] == nlohmann::json({"vllm", "llama.cpp", "sglang", "hf"}));
  CHECK(p["cache_implementation"]["enum"] ==
        nlohmann::json({"dynamic", "static", "offloaded", "quantized"}));
  CHECK(schema["allOf"][3]["then"]["properties"]["dtype"]["enum"].back() == "float32");
  CHECK(schema["allOf"][3]["then"]["properties"]["max_model_len"] == false);
  CHECK(schema["allOf"][0]["then"]["properties"]["prompt_len"] == false);
  CHECK(p["kv_cache_dtype"]["enum"] == nlohmann::json({"auto", "fp8", "fp8_e4m3", "fp8_e5m2"}));
  CHECK(p["cache_type_k"]["enum"][3] == "q8_0");
  CHECK(schema["allOf"][1]["then"]["properties"]["quantization"]["enum"][0] == "F16");
  CHECK(schema["allOf"][0]["then"]["properties"]["ctx_size"] == false);
  // SGLang's branch: its own KV-cache names, vLLM's and llama.cpp's own keys refused.
  const auto& sglang = schema["allOf"][2]["then"]["properties"];
  CHECK(sglang["kv_cache_dtype"]["enum"] == nlohmann::json({"auto", "fp8_e5m2", "fp8_e4m3"}));
  CHECK(sglang["max_model_len"] == false);
  CHECK(sglang["ctx_size"] == false);
  CHECK_FALSE(sglang.contains("context_length"));
}

// A serve result reproduces itself: its `inputs`, written to a run config in another folder
// and given back with --file, give the same document (inputs included), whatever flags made it.
TEST_CASE("serve config: the JSON's inputs given back with --file give the same document",
          "[serve][config]") {
  TempDir dir("serve-config-inputs");
  const std::vector<std::vector<std::string>> cases = {
      {"--model", "llama-3.1-8b", "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--tp", "2",
       "--gpu-memory-utilization", "0.85", "--enforce-eager"},
      {"--config", "configs/models/qwen3-8b.json", "--quantization", "fp8", "--gpu-memory",
       "40GiB"},
      {"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--ctx-size", "16384", "--flash-attn",
       "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--quantization", "Q4_K_M"},
      {"--engine", "llama.cpp", "--model", "qwen3-30b-a3b", "--quantization", "Q8_0", "--device",
       "CUDA0,CUDA1", "--tensor-split", "3,1", "--main-gpu", "1", "--override-tensor", "exps=CPU",
       "--ctx-size", "8192"},
      // ik_llama.cpp's flags and a file's own mix (the Qwen3-MoE graph with weight copies)
      {"--engine", "llama.cpp", "--model", "qwen3-30b-a3b", "--quantization", "Q8_0", "--custom-q",
       "ffn_down_exps=iq4_k,attn_.*=q6_K", "--fused-moe", "--flash-attn", "--attention-max-batch",
       "512", "--override-tensor", "exps=CPU", "--ubatch-size", "2048", "--ctx-size", "8192"},
      {"--engine",
       "sglang",
       "--model",
       "llama-3.1-8b",
       "--context-length",
       "8192",
       "--kv-cache-dtype",
       "fp8_e4m3",
       "--tp-size",
       "2",
       "--mem-fraction-static",
       "0.8",
       "--page-size",
       "16",
       "--max-running-requests",
       "64",
       "--chunked-prefill-size",
       "4096",
       "--cuda-graph-max-bs",
       "64",
       "--disable-cuda-graph",
       "--max-total-tokens",
       "100000",
       "--dtype",
       "float16",
       "--quantization",
       "fp8"},
      {"--engine", "hf", "--model", "qwen3-8b", "--prompt-len", "4096", "--max-new-tokens", "512",
       "--batch-size", "8", "--quantization", "bnb-4bit", "--cache-implementation", "offloaded",
       "--gpu", "a100-80gb"},
  };
  int i = 0;
  for (const auto& flags : cases) {
    std::vector<std::string> args = {"serve"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--format", "json"});
    const auto first = run_cli(args);
    INFO(first.err);
    REQUIRE(first.code == 0);
    const nlohmann::json doc = nlohmann::json::parse(first.out);
    REQUIRE(doc.contains("inputs"));
    CHECK(doc["inputs"].contains("engine"));
    const std::string path = serve_write(dir, fmt::format("in{}.json", i++), doc["inputs"].dump());
    const auto again = run_cli({"serve", "--file", path, "--format", "json"});
    INFO(again.err);
    REQUIRE(again.code == 0);
    CHECK(nlohmann::json::parse(again.out) == doc);
  }
}

// A switch takes true or false as the training flags do: --enforce-eager=false is off, and
// overrides a run config's true; another word is one line and exit 2.
TEST_CASE("serve: a switch given false is off, over a file's true too", "[serve][config]") {
  TempDir dir("serve-switch-false");
  const auto graphs = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"serve", "--max-model-len", "8192", "--format", "json"});
    const auto r = memest::test::run_cli(args);
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    // Eager: no graphs (0 bytes) and the echo says so; else the pool is not modelled (null).
    CHECK(j["cuda_graphs"]["bytes"].is_null() != j["inputs"].contains("enforce_eager"));
    return std::string(j["cuda_graphs"]["bytes"].is_null() ? "graphs" : "eager");
  };
  CHECK(graphs({"--model", "llama-3.1-8b"}) == "graphs");
  CHECK(graphs({"--model", "llama-3.1-8b", "--enforce-eager"}) == "eager");
  CHECK(graphs({"--model", "llama-3.1-8b", "--enforce-eager=true"}) == "eager");
  CHECK(graphs({"--model", "llama-3.1-8b", "--enforce-eager=false"}) == "graphs");
  const std::string eager =
      serve_write(dir, "eager.json", R"({"model": "llama-3.1-8b", "enforce_eager": true})");
  CHECK(graphs({"--file", eager}) == "eager");
  CHECK(graphs({"--file", eager, "--enforce-eager=false"}) == "graphs");
  const auto bad =
      memest::test::run_cli({"serve", "--model", "llama-3.1-8b", "--enforce-eager=maybe"});
  CHECK(bad.code == 2);
  CHECK(bad.err ==
        "memest: error: --enforce-eager: \"maybe\" is not a switch's value (expected true or "
        "false, or no value)\n");
}
