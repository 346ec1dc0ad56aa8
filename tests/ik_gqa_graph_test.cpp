// ik_llama.cpp's Qwen3-MoE graph with weights in host memory (src/serve/ik_gqa_graph.cpp): when
// it sizes the buffers, and the weights it reads where the loader put them. Its buffers against
// the published log: tests/serve_llama_cpp_test.cpp.
#include "serve/ik_gqa_graph.hpp"

#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

TEST_CASE("ik_llama.cpp: the Qwen3-MoE graph needs flash attention, GPU layers and host weights",
          "[serve]") {
  memest::Architecture a;
  a.model_type = "qwen3_moe";
  a.num_experts = 128;
  memest::LlamaCppSettings s;
  s.flash_attn = true;
  memest::LlamaCppPlacement p;
  p.layer_device = {0, 0};
  memest::PlacedWeights w = {{"blk.1.ffn_up_exps.weight", {memest::kLlamaHost, 100}},
                             {"blk.1.attn_q.weight", {0, 10}},
                             {"token_embd.weight", {memest::kLlamaHost, 10}}};
  CHECK(memest::gqa_graph_path(a, s, p, w));
  // token_embd is always on the host: no layer weight there, no copies.
  memest::PlacedWeights gpu = w;
  gpu["blk.1.ffn_up_exps.weight"].device = 0;
  CHECK_FALSE(memest::gqa_graph_path(a, s, p, gpu));
  s.flash_attn = false;
  CHECK_FALSE(memest::gqa_graph_path(a, s, p, w));
  s.flash_attn = true;
  p.layer_device = {0, memest::kLlamaHost};  // a CPU layer: its attention reads host KV
  CHECK_FALSE(memest::gqa_graph_path(a, s, p, w));
  p.layer_device = {0, 0};
  p.row = true;
  CHECK_FALSE(memest::gqa_graph_path(a, s, p, w));
  p.row = false;
  a.model_type = "llama";  // another family's graph: not read
  CHECK_FALSE(memest::gqa_graph_path(a, s, p, w));
}

TEST_CASE("ik_llama.cpp: weights placed by name, a layer's experts summed", "[serve]") {
  std::vector<memest::LlamaTensor> t(3);
  t[0].name = t[1].name = "blk.0.ffn_up_exps.weight";
  t[0].bytes = t[1].bytes = 7;
  t[2].name = "output.weight";
  t[2].bytes = 5;
  t[2].tied_copy = true;  // the output's copy of token_embd: not a weight of its own
  const memest::PlacedWeights w = memest::placed_weights(t, {memest::kLlamaHost, 0, 1});
  REQUIRE(w.size() == 1);
  CHECK(w.at("blk.0.ffn_up_exps.weight").bytes == 14);
}

TEST_CASE("ik_llama.cpp: below the experts' batch the host computes them, no copies", "[serve]") {
  // 256 tokens x 8 experts < 32 x 128: ik_llama.cpp leaves the expert ops on the host.
  const auto j = memest::test::run_json(
      {"serve", "--engine", "llama.cpp", "--config",
       memest::test::kRoot + "/tests/data/inference/qwen3-235b-a22b.json", "--ctx-size", "4096",
       "--flash-attn", "--ubatch-size", "256", "--fused-moe", "--quantization", "Q8_0",
       "--override-tensor", "exps=CPU", "--device", "CUDA0"});
  CHECK(j.at("notes").back().get<std::string>().starts_with(
      "the host computes the experts of 94 MoE layers at 256 tokens"));
}
