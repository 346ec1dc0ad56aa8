// The model families of 2024-2025 through the command line, the Hub-id and local-cache lookup of
// --model, and quantization_config (tests/data/models/SOURCES.md has the configs' sources).
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace memest;
using memest::test::run_cli;
using memest::test::TempDir;

namespace fs = std::filesystem;

namespace {

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

}  // namespace

// Every reference-zoo config whose count a published figure confirms (all but those marked
// "verified": false in model_counts.json), through the CLI: parameters.total is the number of
// parameters transformers instantiates, to the parameter.
TEST_CASE("every verified zoo config gives its published count through the CLI", "[models][cli]") {
  const auto counts =
      nlohmann::json::parse(test::read_file(test::data_path("data/model_counts.json")));
  std::size_t checked = 0;
  for (const auto& e : fs::directory_iterator(test::data_path("data/models"))) {
    const std::string name = e.path().stem().string();
    if (e.path().extension() != ".json" || name.starts_with("case-") ||
        name.starts_with("truth-")) {
      continue;
    }
    const auto& want = counts.at(name);
    if (want.contains("verified") && !want.at("verified").get<bool>()) continue;
    INFO("config " << e.path().string());
    const auto r = run_cli({"--config", e.path().string(), "--format", "json"});
    REQUIRE(r.code == 0);
    const auto j = nlohmann::json::parse(r.out);
    CHECK(j.at("parameters").at("total") == want.at("params").get<std::uint64_t>());
    ++checked;
  }
  CHECK(checked >= 48);  // 30 earlier zoo configs + 18 verified 2024-2025 ones
}

TEST_CASE("the 2024-2025 layouts: per-head and full-width q/k norms, sinks, fused experts, SSM",
          "[models]") {
  const auto arch = [](const std::string& file) {
    return *load_hf_config(test::data_path("data/models/" + file + ".json")).arch;
  };
  const Architecture qwen3 = arch("qwen3-0.6b");
  CHECK(qwen3.head_dim == 128);  // 16 heads x 128 = 2048 != hidden 1024
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.qk_norm_full_width);
  CHECK(qwen3.tied_embeddings);
  const Architecture moe = arch("qwen3-30b-a3b");
  CHECK(moe.moe_layers == 48);
  CHECK(moe.shared_expert_size == 0);
  const Architecture aya = arch("aya-23-8b");  // cohere: one weight-only LayerNorm, tied default
  CHECK(aya.norms_per_layer == 1);
  CHECK_FALSE(aya.norm_bias);
  CHECK(aya.tied_embeddings);
  const Architecture glm = arch("glm-4-9b-chat");  // chatglm key names
  CHECK(glm.vocab_size == 151552);
  CHECK(glm.num_kv_heads == 2);
  CHECK(glm.num_layers == 40);
  const Architecture mamba = arch("mamba-2.8b");
  CHECK(mamba.intermediate_size == 5120);  // expand 2 x hidden 2560
  CHECK(mamba.ssm_dt_rank == 160);
  const Architecture ds3 = arch("deepseek-v3");
  CHECK(ds3.moe_layers == 58);  // 61 layers, first_k_dense_replace 3

  // gpt-oss-20b per layer (transformers models/gpt_oss): q 2880 x 4096 + 4096, k and v
  // 2 x (2880 x 512 + 512), o 4096 x 2880 + 2880, sinks 64 = 26,550,144 attention; router
  // 32 x 2880 + 32; experts 32 x (2880 x 5760 + 5760 + 2880 x 2880 + 2880) = 796,538,880;
  // two norms 5,760. 24 layers + embed and untied head 2 x 201,088 x 2880 + norm 2880.
  const ModelSpec oss = load_hf_config(test::data_path("data/models/gpt-oss-20b.json"));
  CHECK(parameter_count(oss.inventory) ==
        24ull * (26550144 + 92192 + 796538880 + 5760) + 2ull * 201088 * 2880 + 2880);
  // a token runs 4 of the 32 experts: 28 x 24,891,840 skipped in each of 24 layers
  CHECK(oss.active_params == parameter_count(oss.inventory) - 24ull * 28 * 24891840);
}

TEST_CASE("families without a zoo config: bloom, olmo2, olmoe, glm4, granite-moe", "[models]") {
  auto [text, params] = GENERATE(table<std::string, std::uint64_t>({
      // bigscience/bloom-560m's shapes; its published count is 559,214,592: embed 250880 x 1024
      // + LayerNorm 2048; 24 x (qkv 3 x 1024^2 + 3072, dense 1024^2 + 1024, h_to_4h 4 x 1024^2
      // + 4096, 4h_to_h 4 x 1024^2 + 1024, 2 LayerNorms 4096) + ln_f 2048; tied.
      {R"({"model_type": "bloom", "vocab_size": 250880, "hidden_size": 1024, "n_layer": 24,
           "n_head": 16})",
       559214592},
      // olmo2 (models/olmo2): 2 layers of q,k,v,o 4 x 64^2, q/k norms over all heads 2 x 64,
      // gate/up/down 3 x 64 x 128, post-attention and post-feedforward norms 2 x 64;
      // + embed and untied head 2 x 100 x 64 + final norm 64.
      {R"({"model_type": "olmo2", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "intermediate_size": 128})",
       2 * (4 * 64 * 64 + 2 * 64 + 3 * 64 * 128 + 2 * 64) + 2 * 100 * 64 + 64},
      // olmoe (models/olmoe): k norm over the 2 kv heads of 16 = 32; router 4 x 64; 4 experts
      // of 3 x 64 x 32; q,k,v,o = 64^2 + 2 x 64 x 32 + 64^2.
      {R"({"model_type": "olmoe", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 32,
           "num_experts": 4, "num_experts_per_tok": 2})",
       2 * (2 * 64 * 64 + 2 * 64 * 32 + 64 + 32 + 4 * 64 + 4 * 3 * 64 * 32 + 2 * 64) +
           2 * 100 * 64 + 64},
      // glm4 (models/glm4): q,k,v with bias (head_dim 16: q 64, k/v 32 each), o 64 x 64,
      // gate_up 64 x 256, down 128 x 64, four norms; untied.
      {R"({"model_type": "glm4", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
           "intermediate_size": 128})",
       2 * (64 * 64 + 64 + 2 * (64 * 32 + 32) + 64 * 64 + 64 * 256 + 128 * 64 + 4 * 64) +
           2 * 100 * 64 + 64},
      // granitemoe (models/granitemoe): router 4 x 64; input_linear [4, 2 x 32, 64],
      // output_linear [4, 64, 32], no biases.
      {R"({"model_type": "granitemoe", "vocab_size": 100, "hidden_size": 64,
           "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 32,
           "num_local_experts": 4, "num_experts_per_tok": 2})",
       2 * (4 * 64 * 64 + 4 * 64 + 4 * 64 * 64 + 4 * 64 * 32 + 2 * 64) + 2 * 100 * 64 + 64},
  }));
  INFO(text);
  CHECK(parameter_count(parse_hf_config(text, "c.json").inventory) == params);
}

TEST_CASE("a Hub id in --model: a preset's, then the local Hugging Face cache", "[models][cli]") {
  TempDir tmp("hfcache");
  const fs::path hub = tmp.path / "hub";
  // A cached repository as huggingface_hub lays it out: refs/main names the snapshot.
  const fs::path repo = hub / "models--acme--Tiny-Qwen3";
  write(repo / "refs" / "main", "abc123\n");
  write(repo / "snapshots" / "abc123" / "config.json",
        R"({"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 32, "intermediate_size": 128, "tie_word_embeddings": true})");
  // another with two snapshots and no refs/main
  write(hub / "models--acme--Two" / "snapshots" / "a" / "config.json", "{}");
  write(hub / "models--acme--Two" / "snapshots" / "b" / "config.json", "{}");

  const ModelSpec preset = load_named_model("qwen/qwen3-8b", hub.string());  // case-insensitive
  CHECK(preset.name == "qwen3-8b");
  CHECK(preset.source == "preset \"qwen3-8b\" (the config.json of Qwen/Qwen3-8B)");

  const ModelSpec cached = load_named_model("acme/Tiny-Qwen3", hub.string());
  const std::string file = (repo / "snapshots" / "abc123" / "config.json").string();
  CHECK(cached.source == file);
  CHECK(cached.name == "acme/Tiny-Qwen3");
  // q 64 x 128, k and v 64 x 64 each, o 128 x 64, q/k norms 2 x 32, MLP 3 x 64 x 128, 2 norms
  CHECK(parameter_count(cached.inventory) ==
        2 * (64 * 128 + 2 * 64 * 64 + 128 * 64 + 64 + 3 * 64 * 128 + 128) + 1000 * 64 + 64);

  REQUIRE_THROWS_WITH(
      load_named_model("acme/Missing", hub.string()),
      "model \"acme/Missing\": no preset has this Hub id and the local Hugging Face cache (" +
          hub.string() +
          ") has no models--acme--Missing/snapshots/*/config.json; fetch it with "
          "`huggingface-cli download acme/Missing config.json` and run again, or pass --config "
          "PATH (memest never uses the network)");
  // Issue 23: a Hub id no preset has names the closest preset, case aside (a fine-tune of a
  // preset has its shapes).
  REQUIRE_THROWS_WITH(load_named_model("meta-llama/Llama-3.1-8B-Instruct", hub.string()),
                      Catch::Matchers::StartsWith(
                          "model \"meta-llama/Llama-3.1-8B-Instruct\": no preset has this Hub id "
                          "(did you mean \"llama-3.1-8b\"?) and the local"));
  REQUIRE_THROWS_WITH(load_named_model("acme/Qwen3-8", hub.string()),
                      Catch::Matchers::Contains("(did you mean \"qwen3-8b\"?)"));
  REQUIRE_THROWS_WITH(load_named_model("acme/Two", hub.string()),
                      Catch::Matchers::StartsWith("model \"acme/Two\": the local Hugging Face "
                                                  "cache has 2 snapshots"));
  // A plain name is a preset name, as before.
  REQUIRE_THROWS_WITH(load_named_model("qwen3-9b", hub.string()),
                      Catch::Matchers::StartsWith("unknown model preset \"qwen3-9b\""));

  // Issue 23: a local model folder is its config.json; a folder without one is refused.
  const fs::path snapshot = repo / "snapshots" / "abc123";
  const ModelSpec folder = load_named_model(snapshot.string(), "");
  CHECK(folder.source == file);
  CHECK(parameter_count(folder.inventory) == parameter_count(cached.inventory));
  REQUIRE_THROWS_WITH(load_named_model((repo / "refs").string(), ""),
                      Catch::Matchers::Contains("a folder without a config.json"));
  const auto by_folder = run_cli({"--model", snapshot.string()});
  CHECK(by_folder.code == 0);
  CHECK(by_folder.out.find("config     " + file + "\n") != std::string::npos);

  // Through the CLI, with HF_HOME pointing at the fake cache: the file read is named.
  ::setenv("HF_HOME", tmp.path.c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  const auto r = run_cli({"--model", "acme/Tiny-Qwen3"});
  ::unsetenv("HF_HOME");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("config     " + file + "\n") != std::string::npos);
}

TEST_CASE("the Hub cache folder follows huggingface_hub's variables", "[models]") {
  static const char* vars[4] = {nullptr, nullptr, nullptr,
                                nullptr};  // HF_HUB_CACHE, HF_HOME, XDG, HOME
  const auto env = [](const char* name) -> const char* {
    const std::string n = name;
    if (n == "HF_HUB_CACHE") return vars[0];
    if (n == "HF_HOME") return vars[1];
    if (n == "XDG_CACHE_HOME") return vars[2];
    if (n == "HOME") return vars[3];
    return nullptr;
  };
  CHECK(hf_hub_cache(env).empty());
  vars[3] = "/home/u";
  CHECK(hf_hub_cache(env) == "/home/u/.cache/huggingface/hub");
  vars[2] = "/xdg";
  CHECK(hf_hub_cache(env) == "/xdg/huggingface/hub");
  vars[1] = "/hf";
  CHECK(hf_hub_cache(env) == "/hf/hub");
  vars[0] = "/cache";
  CHECK(hf_hub_cache(env) == "/cache");
}

TEST_CASE("memest models lists presets with Hub ids, filtered", "[models][cli]") {
  const auto all = model_presets();
  for (const PresetInfo& p : all) {
    INFO(p.name);
    CHECK(p.hub_id.find('/') != std::string::npos);  // every preset names its Hub repository
  }
  const auto r = run_cli({"models", "qwen3"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("qwen3-8b                 Qwen/Qwen3-8B") != std::string::npos);
  CHECK(r.out.find("llama") == std::string::npos);
  const auto bad = run_cli({"models", "nosuchmodel"});
  CHECK(bad.code == 2);
  CHECK(bad.err ==
        "memest: error: models: no preset matches \"nosuchmodel\" (by name, Hub id or family; "
        "'memest models' lists all)\n");
}

TEST_CASE("quantization_config is read or refused, never ignored", "[models]") {
  const std::string base = R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 128, )";
  auto [quant, method, bits] = GENERATE(table<std::string, std::string, double>({
      {R"({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]})", "fp8",
       8.0 + 32.0 / 16384.0},
      {R"({"quant_method": "mxfp4"})", "mxfp4", 4.25},
      {R"({"quant_method": "bitsandbytes", "load_in_4bit": true})", "bitsandbytes", 4.5},
      {R"({"quant_method": "gptq", "bits": 4, "group_size": 128})", "gptq", 4.0 + 20.0 / 128.0},
  }));
  const ModelSpec m = parse_hf_config(base + "\"quantization_config\": " + quant + "}", "q.json");
  REQUIRE(m.checkpoint_quant);
  CHECK(m.checkpoint_quant->method == method);
  CHECK(m.checkpoint_quant->bits_per_weight == Approx(bits));
  REQUIRE_THROWS_WITH(
      parse_hf_config(base + R"("quantization_config": {"quant_method": "hqq"}})", "q.json"),
      "q.json: /quantization_config/quant_method: unsupported quantization \"hqq\" (supported: "
      "fp8, mxfp4, bitsandbytes, gptq, awq; remove quantization_config to estimate the "
      "unquantised model)");
  // The estimate says it: DeepSeek-V3's config is fp8.
  const auto r = run_cli({"--model", "deepseek-v3"});
  REQUIRE(r.code == 0);
  CHECK(r.out.find("assumed: the checkpoint is stored quantised (fp8: 8 bits per weight") !=
        std::string::npos);
}

TEST_CASE("mamba: exact model states, activations refused", "[models][cli]") {
  const auto ok = run_cli({"--model", "mamba-2.8b"});
  CHECK(ok.code == 0);
  const auto r = run_cli({"--model", "mamba-2.8b", "--batch", "1", "--seq", "128"});
  CHECK(r.code == 2);
  CHECK(
      r.err.starts_with("memest: error: model_type \"mamba\": the activations of state-space "
                        "(Mamba) layers are not modelled"));
}
