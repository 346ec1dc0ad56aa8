#include "model/families.hpp"

#include <memest/error.hpp>
#include <memest/model.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace memest;

namespace {

TensorGroup group(std::uint64_t rows, std::uint64_t cols, std::uint64_t count) {
  TensorGroup g;
  g.name = "w";
  g.rows = rows;
  g.cols = cols;
  g.count = count;
  return g;
}

}  // namespace

TEST_CASE("parameter_bytes takes each group's storage dtype", "[model]") {
  Inventory inv;
  inv.groups.push_back(group(10, 10, 3));  // 300 elements in the default dtype
  TensorGroup nf4 = group(3, 3, 2);        // 9 elements per tensor: 5 bytes each in nf4
  nf4.storage = Dtype::nf4;
  inv.groups.push_back(nf4);
  TensorGroup absmax = group(1, 4, 2);  // quantization constants: bytes, but not parameters
  absmax.storage = Dtype::fp32;
  absmax.quant_state = true;
  absmax.trainable = false;
  inv.groups.push_back(absmax);

  auto [dtype, bytes] = GENERATE(table<Dtype, std::uint64_t>({
      {Dtype::fp32, 300 * 4 + 2 * 5 + 2 * 16},
      {Dtype::bf16, 300 * 2 + 2 * 5 + 2 * 16},
      {Dtype::int8, 300 + 2 * 5 + 2 * 16},
  }));
  CHECK(parameter_bytes(inv, dtype) == bytes);
  CHECK(parameter_count(inv) == 300 + 18);
  CHECK(tensor_count(inv) == 5);
  CHECK(trainable_count(inv) == 318);
  CHECK(trainable_tensor_count(inv) == 5);
}

TEST_CASE("an inline architecture gets the Llama layout", "[model]") {
  // truth/cases.jsonl: llama, vocab 1000, hidden 128, MLP 344, 2 layers, 4 heads:
  // 651,904 parameters in 21 tensors.
  Architecture a;
  a.model_type = "llama";
  a.vocab_size = 1000;
  a.hidden_size = 128;
  a.num_layers = 2;
  a.num_heads = 4;
  a.intermediate_size = 344;
  a.gated_mlp = true;
  a.rms_norm = true;
  const Inventory inv = build_inventory(a);
  CHECK(parameter_count(inv) == 651904);
  CHECK(tensor_count(inv) == 21);
  // matmul weights: 2 x (4 x 128^2 + 3 x 128 x 344) + lm_head 128,000
  CHECK(matmul_weight_count(inv, false) == 2 * (4 * 128 * 128 + 3 * 128 * 344) + 128000);
  CHECK(active_parameter_count(a, inv) == 651904);
  for (const auto& g : inv.groups) {
    CHECK(g.trainable);
    CHECK(g.matmul == (g.kind != "" && g.name.ends_with(".weight")));
  }
  a.hidden_size = 0;
  REQUIRE_THROWS_AS(build_inventory(a), Error);
}

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
TEST_CASE("each family's tensors carry its Hugging Face module names", "[model][families]") {
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

TEST_CASE("a model_type without a row gets Llama's names and is not measured",
          "[model][families]") {
  const auto n = names_of(build_inventory(small("my_llama", 2)));
  CHECK(has(n, "model.embed_tokens.weight"));
  CHECK(has(n, "model.layers.*.self_attn.q_proj.weight"));
  CHECK(has(n, "model.layers.*.mlp.down_proj.weight"));
  CHECK(has(n, "lm_head.weight"));
  CHECK_FALSE(detail::family_of("my_llama").measured);
  CHECK(detail::family_of("llama").measured);
  CHECK_FALSE(detail::family_of("phi3").measured);
}

TEST_CASE("the layer graph is the norm's", "[model][families]") {
  Architecture a = small("chatglm", 2);
  a.rms_norm = true;
  CHECK(detail::layer_graph(a) == LayerGraph::llama);
  a.rms_norm = false;  // chatglm's "rmsnorm": false
  CHECK(detail::layer_graph(a) == LayerGraph::gpt2);
}

TEST_CASE("a bare count stands for a canonical Llama-style decoder", "[model]") {
  // 7e9 parameters: hidden 4096 (5e9 <= P < 1e10), layers round((7e9 - 2 x 32000 x 4096) /
  // (12 x 4096^2)) = round(33.46) = 33, MLP 8 x 4096 / 3 = 10923 -> 11008.
  const Architecture a = canonical_architecture(7'000'000'000);
  CHECK(a.hidden_size == 4096);
  CHECK(a.num_layers == 33);
  CHECK(a.intermediate_size == 11008);
  CHECK(a.num_heads == 32);
  const ModelSpec m = model_from_count(7'000'000'000);
  CHECK_FALSE(m.inventory.shapes_known);
  CHECK(parameter_count(m.inventory) == 7'000'000'000);
  CHECK(m.canonical_inventory == build_inventory(a));
}
