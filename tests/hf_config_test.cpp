#include "model/families.hpp"
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>
#include <memest/model.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

using namespace memest;

namespace {

std::uint64_t role_sum(const Inventory& inv, Role role) {
  std::uint64_t n = 0;
  for (const auto& g : inv.groups) {
    if (g.role == role) n += g.elements();
  }
  return n;
}

// Groups repeated per layer carry a "*" in their name; the rest are model-level.
std::uint64_t per_layer_sum(const Inventory& inv) {
  std::uint64_t n = 0;
  for (const auto& g : inv.groups) {
    if (g.name.find('*') != std::string::npos) n += g.elements();
  }
  return n;
}

std::uint64_t final_norm_sum(const Inventory& inv) {
  std::uint64_t n = 0;
  for (const auto& g : inv.groups) {
    if (g.role == Role::norm && g.name.find('*') == std::string::npos) n += g.elements();
  }
  return n;
}

}  // namespace

// Every config under tests/data/models/ (see SOURCES.md) must reproduce the exact parameter
// count transformers instantiates, and the tensor count where one was measured; the
// per-part breakdowns, where published, must match the groups too.
TEST_CASE("every model config reproduces its exact parameter and tensor count", "[hf_config]") {
  const auto expected =
      nlohmann::json::parse(test::read_file(test::data_path("data/model_counts.json")));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(test::data_path("data/models"))) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() == expected.size());

  for (const auto& path : files) {
    const std::string name = path.stem().string();
    INFO("config " << path.string());
    REQUIRE(expected.contains(name));
    const auto& want = expected.at(name);
    const ModelSpec m = load_hf_config(path.string());
    const Inventory& inv = m.inventory;

    CHECK(parameter_count(inv) == want.at("params").get<std::uint64_t>());
    if (want.contains("tensors")) {
      CHECK(tensor_count(inv) == want.at("tensors").get<std::uint64_t>());
    }
    if (want.contains("active")) {
      CHECK(m.active_params == want.at("active").get<std::uint64_t>());
    } else if (m.arch->num_experts == 0) {
      CHECK(m.active_params == parameter_count(inv));
    }
    if (want.contains("parts")) {
      const auto& parts = want.at("parts");
      CHECK(role_sum(inv, Role::embedding) == parts.at("embedding").get<std::uint64_t>());
      CHECK(role_sum(inv, Role::head) == parts.at("lm_head").get<std::uint64_t>());
      CHECK(per_layer_sum(inv) == parts.at("layers").get<std::uint64_t>());
      CHECK(final_norm_sum(inv) == parts.at("final_norm").get<std::uint64_t>());
      if (parts.contains("position")) {
        CHECK(role_sum(inv, Role::position) == parts.at("position").get<std::uint64_t>());
      }
    }
    // The groups partition the model: per role, they add up to the total.
    std::uint64_t by_role = 0;
    for (std::string_view r : role_names()) by_role += role_sum(inv, parse_role(r));
    CHECK(by_role == parameter_count(inv));
    // Everything trains but a multimodal checkpoint's vision tower, which a text step never runs.
    CHECK(trainable_count(inv) == parameter_count(inv) - role_sum(inv, Role::vision));
  }
}

// Tensor counts of the zoo models, worked from the transformers module layout.
TEST_CASE("tensor counts follow the module layout", "[hf_config]") {
  auto [file, tensors] = GENERATE(table<std::string, std::uint64_t>({
      // 12 layers x (ln_1 w,b + c_attn w,b + c_proj w,b + ln_2 w,b + c_fc w,b + c_proj w,b)
      // + wte + wpe + ln_f w,b = 144 + 4
      {"gpt2", 148},
      // 32 x (q,k,v,o + gate,up,down + 2 norms) + embed + norm + lm_head = 288 + 3
      {"llama-2-7b", 291},
      // embeddings: word, position, token type, LayerNorm w,b (5); 12 x 16; pooler w,b (2)
      {"bert-base-uncased", 199},
      // shared (1); encoder 6 x (q,k,v,o, ln, wi, wo, ln) + rel. bias + final ln = 50;
      // decoder 6 x (4 + ln + 4 + ln + wi, wo + ln) + rel. bias + final ln = 80
      {"t5-small", 131},
      // 32 x (qkv_proj, o_proj, gate_up_proj, down_proj, 2 norms) + embed + norm + lm_head
      {"phi-3-mini-4k-instruct", 195},
      // 32 x (query_key_value, dense, h_to_4h, 4h_to_h, input_layernorm w,b) + embed + ln_f w,b
      {"falcon-7b", 195},
      // 16 x 7 projections, no norm parameters, tied: + embed
      {"olmo-1b", 113},
      // 32 x (4 attention + router + 8 x 3 experts + 2 norms) + embed + norm + lm_head
      {"mixtral-8x7b", 995},
      // text: embed + 34 x (q,k,v,o, q/k norms, gate,up,down, 4 norms) + norm = 444; SigLIP
      // tower: patch conv w,b + positions + 27 x (k,v,q,out w,b, 2 LayerNorms w,b, fc1, fc2 w,b)
      // + post LayerNorm w,b = 437; projector weight + its norm = 2
      {"gemma-3-4b-it", 883},
  }));
  INFO(file);
  const ModelSpec m = load_hf_config(test::data_path("data/models/" + file + ".json"));
  REQUIRE(tensor_count(m.inventory) == tensors);
}

TEST_CASE("architecture fields are read from the config with the class defaults", "[hf_config]") {
  const auto arch = [](const std::string& file) {
    return *load_hf_config(test::data_path("data/models/" + file + ".json")).arch;
  };
  const Architecture gpt2 = arch("gpt2");
  CHECK(gpt2.activation == "gelu_new");
  CHECK(gpt2.attn_dropout == 0.1);
  CHECK(gpt2.resid_dropout == 0.1);
  CHECK(gpt2.embd_dropout == 0.1);
  CHECK(gpt2.tied_embeddings);
  CHECK(gpt2.intermediate_size == 4 * 768);  // n_inner absent: 4 * n_embd
  CHECK(gpt2.max_positions == 1024);

  const Architecture llama = arch("llama-1-7b");  // legacy keys: no num_key_value_heads
  CHECK(llama.num_kv_heads == 32);
  CHECK_FALSE(llama.tied_embeddings);
  CHECK(llama.activation == "silu");
  CHECK(llama.attn_dropout == 0.0);

  const Architecture falcon = arch("falcon-7b");  // RefinedWebModel, multi_query
  CHECK(falcon.model_type == "falcon");
  CHECK(falcon.num_kv_heads == 1);
  CHECK(falcon.parallel_block);
  CHECK(falcon.norms_per_layer == 1);

  const Architecture opt = arch("opt-125m");
  CHECK(opt.max_positions == 2050);  // max_position_embeddings + 2
  CHECK(opt.activation == "relu");

  const Architecture gemma = arch("gemma-7b");
  CHECK(gemma.head_dim == 256);
  CHECK(gemma.tied_embeddings);
  CHECK(gemma.activation == "gelu_pytorch_tanh");

  const Architecture mixtral = arch("mixtral-8x7b");
  CHECK(mixtral.num_experts == 8);
  CHECK(mixtral.experts_per_token == 2);
  CHECK(mixtral.moe_layers == 32);

  const Architecture ds = arch("deepseek-v2-lite");
  CHECK(ds.moe_layers == 26);  // first_k_dense_replace 1
  CHECK(ds.q_lora_rank == 0);
  CHECK(ds.shared_expert_size == 2 * 1408);
}

TEST_CASE("falcon: num_kv_heads counts only with the new decoder architecture", "[hf_config]") {
  // A re-saved falcon-7b carries num_kv_heads 71; multi_query still means one kv head.
  const std::string base =
      R"({"model_type": "falcon", "vocab_size": 65024, "hidden_size": 4544,
          "num_hidden_layers": 32, "num_attention_heads": 71, "num_kv_heads": 71)";
  CHECK(parameter_count(parse_hf_config(base + "}", "f.json").inventory) == 6921720704);
  // new_decoder_architecture: qkv is (heads + 2 kv) * head_dim and two norms (ln_attn, ln_mlp)
  const ModelSpec m = parse_hf_config(
      R"({"model_type": "falcon", "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 8, "num_kv_heads": 2, "new_decoder_architecture": true})",
      "f.json");
  // qkv 64 x (8 + 4) * 8 = 6144, dense 4096, mlp 2 x 64 x 256 = 32768, 2 LayerNorms 256
  // per layer = 43264; x2 + embedding 6400 + ln_f 128 (tied) = 93056
  CHECK(parameter_count(m.inventory) == 93056);
}

TEST_CASE("qwen2_moe: routed, shared and gated shared experts", "[hf_config]") {
  // Qwen1.5-MoE-A2.7B's config.json (Qwen/Qwen1.5-MoE-A2.7B); its model card gives 14.3B total.
  const std::string cfg = R"({"model_type": "qwen2_moe", "vocab_size": 151936,
      "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
      "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 60,
      "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
      "tie_word_embeddings": false})";
  const ModelSpec m = parse_hf_config(cfg, "q.json");
  // per layer: attention 4 x 2048^2 + q,k,v biases 3 x 2048 = 16783360; router 60 x 2048 =
  // 122880; experts 60 x 3 x 2048 x 1408 = 519045120; shared 3 x 2048 x 5632 = 34603008;
  // shared gate 2048; norms 4096 -> 570560512 x 24 = 13693452288;
  // + embed and lm_head 2 x 151936 x 2048 = 622329856 + final norm 2048 = 14315784192
  CHECK(parameter_count(m.inventory) == 14315784192);
  // a token skips 56 experts per layer: 56 x 3 x 2048 x 1408 x 24 = 11626610688
  CHECK(m.active_params == 14315784192 - 11626610688);
}

TEST_CASE("malformed and unsupported configs name the file and the key", "[hf_config]") {
  auto [text, message] = GENERATE(table<std::string, std::string>({
      {R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
           "num_hidden_layers": 32, "num_attention_heads": "32", "intermediate_size": 11008})",
       "path/config.json: /num_attention_heads: expected a positive integer, got string \"32\""},
      {R"({"model_type": "foo"})",
       "path/config.json: /model_type: unsupported model_type \"foo\" (supported: bert, bloom, "
       "chatglm, cohere, deepseek_v2, deepseek_v3, falcon, gemma, gemma2, gemma3, gemma3_text, "
       "glm, "
       "glm4, "
       "gpt2, gpt_neox, gpt_oss, gptj, granite, granitemoe, internlm2, llama, mamba, megatron_gpt, "
       "mistral, mixtral, mpt, olmo, olmo2, olmoe, opt, phi, phi3, qwen2, qwen2_moe, qwen3, "
       "qwen3_moe, "
       "roberta, stablelm, starcoder2, t5)"},
      // Keys of a Llama-style decoder: the --architecture that would estimate it.
      {R"({"model_type": "exaone", "vocab_size": 1000, "hidden_size": 64,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 128})",
       "path/config.json: /model_type: unsupported model_type \"exaone\" (supported: bert, "
       "bloom, chatglm, cohere, deepseek_v2, deepseek_v3, falcon, gemma, gemma2, gemma3, "
       "gemma3_text, glm, glm4, gpt2, gpt_neox, gpt_oss, gptj, granite, granitemoe, internlm2, "
       "llama, mamba, "
       "megatron_gpt, mistral, mixtral, mpt, olmo, olmo2, olmoe, opt, phi, phi3, qwen2, qwen2_moe, "
       "qwen3, "
       "qwen3_moe, roberta, stablelm, starcoder2, t5); its keys fit a Llama-style decoder: "
       "--architecture '{\"model_type\": \"llama\", \"vocab_size\": 1000, \"hidden_size\": 64, "
       "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"intermediate_size\": 128, "
       "\"num_key_value_heads\": 2}' estimates it with Llama's layout (check its biases, norms "
       "and tying)"},
      {R"({"model_type": "llama", "vocab_size": 32000})",
       "path/config.json: /hidden_size: missing required key"},
      {R"({"vocab_size": 32000})", "path/config.json: /model_type: missing required key"},
      {R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": -2,
           "n_head": 12})",
       "path/config.json: /n_layer: expected a positive integer, got number -2"},
      {R"({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 2,
           "n_head": 12, "tie_word_embeddings": "yes"})",
       "path/config.json: /tie_word_embeddings: expected true or false, got string \"yes\""},
      {R"({"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 5,
           "intermediate_size": 11008})",
       "path/config.json: /num_key_value_heads: expected a divisor of num_attention_heads 32, "
       "got number 5"},
      {"[1, 2]", "path/config.json: /: expected an object, got an array"},
      {"{\n  \"model_type\": ,\n}",
       "path/config.json: invalid JSON: parse error at line 2, column 17: syntax error while "
       "parsing value - unexpected ','; expected '[', '{', or a literal"},
  }));
  REQUIRE_THROWS_WITH(parse_hf_config(text, "path/config.json"), message);
}

TEST_CASE("comments are allowed and a missing file is named", "[hf_config]") {
  const ModelSpec m = parse_hf_config(
      "// from somewhere\n{\"model_type\": \"gpt2\", \"vocab_size\": 1000, \"n_embd\": 128, "
      "\"n_layer\": 2, \"n_head\": 4, \"n_positions\": 256}",
      "x/tiny/config.json");
  CHECK(parameter_count(m.inventory) == 557568);  // truth/cases.jsonl
  CHECK(m.name == "tiny");
  REQUIRE_THROWS_WITH(load_hf_config("no/such/config.json"),
                      "no/such/config.json: cannot open file: No such file or directory");
  // An ifstream opens a directory and reads nothing: it used to say "invalid JSON".
  const std::string dir = test::data_path("data/models");
  REQUIRE_THROWS_WITH(load_hf_config(dir), dir + ": cannot open file: Is a directory");
}

TEST_CASE("presets are the shipped config.json files with their exact counts", "[hf_config]") {
  const auto expected =
      nlohmann::json::parse(test::read_file(test::data_path("data/model_counts.json")));
  const std::vector<PresetInfo> presets = model_presets();
  REQUIRE(presets.size() >= 18);
  REQUIRE(std::is_sorted(presets.begin(), presets.end(),
                         [](const auto& a, const auto& b) { return a.name < b.name; }));
  for (const PresetInfo& p : presets) {
    INFO("preset " << p.name);
    // Every preset is a copy of a zoo config under the same name.
    REQUIRE(expected.contains(p.name));
    CHECK(p.params == expected.at(p.name).at("params").get<std::uint64_t>());
    const ModelSpec m = load_model_preset(p.name);
    CHECK(m.name == p.name);
    CHECK(m.arch->model_type == p.family);
    CHECK(m.active_params == p.active_params);
  }
  const auto mixtral = std::find_if(presets.begin(), presets.end(),
                                    [](const auto& p) { return p.name == "mixtral-8x7b"; });
  REQUIRE(mixtral != presets.end());
  CHECK(mixtral->params == 46702792704);
  CHECK(mixtral->active_params == 12879925248);
}

TEST_CASE("an unknown preset suggests the closest name", "[hf_config]") {
  auto [name, message] = GENERATE(table<std::string, std::string>({
      {"llama2-7b",
       "unknown model preset \"llama2-7b\" (did you mean \"llama-2-7b\"?; see 'memest models')"},
      {"mistral-7b",
       "unknown model preset \"mistral-7b\" (did you mean \"mistral-7b-v0.1\"?; see 'memest "
       "models')"},
      {"bloom-176b", "unknown model preset \"bloom-176b\" (see 'memest models')"},
  }));
  REQUIRE_THROWS_WITH(load_model_preset(name), message);
}

// supported_model_types() is the reader table of src/input/hf_families.cpp; each type needs a
// family row (src/model/families.cpp) for its module names, and a line in the docs.
TEST_CASE("every supported model_type has a family row and is documented", "[hf_config]") {
  const auto types = supported_model_types();
  REQUIRE(std::is_sorted(types.begin(), types.end()));
  std::vector<std::string_view> rows;
  for (const auto& f : detail::model_families()) rows.push_back(f.type);
  REQUIRE(std::vector<std::string_view>(types.begin(), types.end()) == rows);

  // docs/models.md's family table: the first cell of each row names its types ("`bert`,
  // `roberta`").
  std::istringstream models(test::read_file(std::string(MEMEST_SOURCE_DIR) + "/docs/models.md"));
  std::string first_cells;
  for (std::string line; std::getline(models, line);) {
    if (line.starts_with("| `")) first_cells += line.substr(0, line.find('|', 1));
  }
  for (const std::string_view t : types) {
    INFO(t);
    CHECK(first_cells.find(fmt::format("`{}`", t)) != std::string::npos);
  }
  // README: "`--config PATH` takes any Hugging Face `config.json` of the N supported model types"
  const std::string readme = test::read_file(std::string(MEMEST_SOURCE_DIR) + "/README.md");
  CHECK(readme.find(fmt::format("of the {} supported model types", types.size())) !=
        std::string::npos);
}
