// The model families (src/model/families.cpp): the module names each gives its tensors, and
// what the layer graph was measured on.
#include "model/families.hpp"

#include <memest/activation.hpp>
#include <memest/hf_config.hpp>
#include <memest/model.hpp>
#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace memest;

namespace {

std::vector<std::string> names_of(const Inventory& inv) {
  std::vector<std::string> out;
  for (const auto& g : inv.groups) out.push_back(g.name);
  return out;
}

bool has(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A small decoder of `type` with `norms` norms per layer.
Architecture small(std::string type, std::uint64_t norms) {
  Architecture a;
  a.model_type = std::move(type);
  a.vocab_size = 100;
  a.hidden_size = 16;
  a.num_layers = 2;
  a.num_heads = 2;
  a.intermediate_size = 32;
  a.norms_per_layer = norms;
  return a;
}

}  // namespace

// The parameter names transformers' state_dict() gives (the modeling files of each family).
TEST_CASE("each family's tensors carry its Hugging Face module names", "[families]") {
  Architecture gpt2 = small("gpt2", 2);
  gpt2.fused_qkv = true;
  gpt2.max_positions = 64;
  const auto g = names_of(build_inventory(gpt2));
  CHECK(has(g, "transformer.wte.weight"));
  CHECK(has(g, "transformer.wpe.weight"));
  CHECK(has(g, "transformer.h.*.attn.c_attn.weight"));
  CHECK(has(g, "transformer.h.*.ln_2.weight"));
  CHECK(has(g, "transformer.ln_f.weight"));

  // Falcon-40B's new decoder architecture: two norms of a parallel block, ln_attn and ln_mlp;
  // GPT-NeoX's parallel block keeps input_layernorm and post_attention_layernorm.
  Architecture falcon = small("falcon", 2);
  falcon.parallel_block = true;
  const auto f = names_of(build_inventory(falcon));
  CHECK(has(f, "transformer.h.*.ln_attn.weight"));
  CHECK(has(f, "transformer.h.*.ln_mlp.weight"));
  falcon.norms_per_layer = 1;  // Falcon-7B: one input_layernorm
  CHECK(has(names_of(build_inventory(falcon)), "transformer.h.*.input_layernorm.weight"));
  Architecture neox = small("gpt_neox", 2);
  neox.parallel_block = true;
  CHECK(has(names_of(build_inventory(neox)), "gpt_neox.layers.*.post_attention_layernorm.weight"));

  // Phi names its q/k LayerNorms q_layernorm; Qwen3 q_norm.
  Architecture phi = small("phi", 1);
  phi.qk_norm = true;
  CHECK(has(names_of(build_inventory(phi)), "model.layers.*.self_attn.q_layernorm.weight"));
  Architecture qwen3 = small("qwen3", 2);
  qwen3.qk_norm = true;
  qwen3.rms_norm = true;
  CHECK(has(names_of(build_inventory(qwen3)), "model.layers.*.self_attn.q_norm.weight"));

  // Gemma-2 has four norms a layer; a fifth has no name and is numbered.
  const auto gemma = names_of(build_inventory(small("gemma2", 5)));
  CHECK(has(gemma, "model.layers.*.post_feedforward_layernorm.weight"));
  CHECK(has(gemma, "model.layers.*.norm_4.weight"));
}

TEST_CASE("a model_type without a row gets Llama's names and is not measured", "[families]") {
  const auto n = names_of(build_inventory(small("my_llama", 2)));
  CHECK(has(n, "model.embed_tokens.weight"));
  CHECK(has(n, "model.layers.*.self_attn.q_proj.weight"));
  CHECK(has(n, "model.layers.*.mlp.down_proj.weight"));
  CHECK(has(n, "lm_head.weight"));
  CHECK_FALSE(detail::family_of("my_llama").measured);
  CHECK(detail::family_of("llama").measured);
  CHECK_FALSE(detail::family_of("phi3").measured);
}

TEST_CASE("a family row's layer graph is its config reader's norm", "[families]") {
  // The row states the graph; the reader (src/input/hf_families.cpp) reads the norm from the
  // config: every preset of a family with a graph of its own has the norm of that graph.
  std::size_t checked = 0;
  for (const PresetInfo& p : model_presets()) {
    const ModelSpec m = load_model_preset(p.name);
    const auto graph = detail::family_of(m.arch->model_type).graph;
    if (!graph) continue;
    INFO(p.name);
    CHECK(*graph == (m.arch->rms_norm ? LayerGraph::llama : LayerGraph::gpt2));
    ++checked;
  }
  CHECK(checked > 40);
  CHECK(detail::family_of("gpt2").graph == LayerGraph::gpt2);
  CHECK(detail::family_of("llama").graph == LayerGraph::llama);
}

TEST_CASE("chatglm, megatron_gpt and unlisted types follow the config's norm", "[families]") {
  CHECK_FALSE(detail::family_of("chatglm").graph);
  CHECK_FALSE(detail::family_of("megatron_gpt").graph);
  CHECK_FALSE(detail::family_of("my_llama").graph);
  RunSpec run;
  run.model = load_model_preset("llama-2-7b");
  run.model.arch->model_type = "chatglm";
  run.training.micro_batch = 1;
  run.training.seq_len = 16;
  run.model.arch->rms_norm = true;
  CHECK(activation_inputs(run, Notes::skipped)->graph == LayerGraph::llama);
  run.model.arch->rms_norm = false;  // chatglm's "rmsnorm": false
  CHECK(activation_inputs(run, Notes::skipped)->graph == LayerGraph::gpt2);
}
