// ik_llama.cpp's Qwen3-MoE graph with weights in host memory (src/serve/ik_gqa_graph.cpp): when
// it sizes the buffers, and the weights it reads where the loader put them. Its buffers against
// the published log: tests/serve_llama_cpp_test.cpp.
#include "serve/ik_gqa_graph.hpp"

#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
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
  t[0].layer = t[1].layer = 0;
  t[2].name = "output.weight";
  t[2].bytes = 5;
  t[2].tied_copy = true;  // the output's copy of token_embd: not a weight of its own
  const memest::PlacedWeights w = memest::placed_weights(t, {memest::kLlamaHost, 0, 1});
  REQUIRE(w.size() == 1);
  CHECK(w.at("blk.0.ffn_up_exps.weight").bytes == 14);
  CHECK(w.at("blk.0.ffn_up_exps.weight").layer == 0u);
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

TEST_CASE("ik_llama.cpp: three more logs of the same file, held out, as printed", "[serve]") {
  // ikawrakow/ik_llama.cpp issue 437 (mtcl, 2025-06-09 07:20, 07:26 and 08:09, build 3737
  // 58f08e43; the archived thread at github-data/issues of commit 8337e4cd): ubergarm's
  // Qwen3-235B-A22B mix-IQ3_K (the run of tests/data/inference/runs.jsonl's types) on two RTX
  // 4090s, q8_0 K and V, -fa -b 4096 -ub 4096 -fmoe: 65,536 cells with -ngl 100 and
  // --override-tensor exps=CPU, after (in the second) layers 0-11 ffn on CUDA0 and 15-18, 20-27
  // on CUDA1; 32,768 cells with -ngl 99, the ffn of layers 12-93 on the CPU, and -rtr, which
  // repacks the host's experts into ik_llama.cpp's _r4 types of the same size, which its CUDA
  // backend still takes (ggml_backend_cuda_supports_op lists IQ3_K_R4 and IQ4_K_R4). The KV
  // buffers (47 layers each) show the layer split free memory made, which --tensor-split 49,51
  // gives. The mechanism was built on the other log; these were not used.
  struct Printed {
    const char* ctx;
    const char* overrides;
    double weights0, weights1, buffer0, buffer1, host;
  };
  for (const Printed& log :
       {Printed{"65536", "exps=CPU", 2742.20, 3372.81, 2432.02, 2502.00, 1088.05},
        Printed{"65536",
                "blk\\.[0-9]\\.ffn=CUDA0,blk\\.1[0-1]\\.ffn=CUDA0,blk\\.1[5-8]\\.ffn=CUDA1,"
                "blk\\.2[0-7]\\.ffn=CUDA1,exps=CPU",
                15822.01, 16501.00, 2432.02, 2502.00, 1088.05},
        Printed{"32768",
                "blk\\.1[2-9]\\.ffn.*=CPU,blk\\.[2-8][0-9]\\.ffn.*=CPU,blk\\.9[0-3]\\.ffn.*=CPU",
                15775.66, 3278.08, 2096.02, 2502.00, 576.05}}) {
    INFO(log.overrides);
    const nlohmann::json j = memest::test::run_json(
        {"serve",
         "--engine",
         "llama.cpp",
         "--config",
         memest::test::kRoot + "/tests/data/inference/qwen3-235b-a22b.json",
         "--ctx-size",
         log.ctx,
         "--cache-type-k",
         "q8_0",
         "--cache-type-v",
         "q8_0",
         "--flash-attn",
         "--batch-size",
         "4096",
         "--ubatch-size",
         "4096",
         "--fused-moe",
         "--device",
         "CUDA0,CUDA1",
         "--tensor-split",
         "49,51",
         "--sched-copies",
         "1",
         "--quantization",
         "Q8_0",
         "--custom-q",
         "attn_(q|k|v|output)=iq6_k,ffn_(gate|up)_exps=iq3_k,ffn_down_exps=iq4_k",
         "--override-tensor",
         log.overrides});
    const auto mib = [&](std::size_t d, const char* what) {
      return j.at("per_device").at(d).at(what).at("bytes").get<double>() / (1 << 20);
    };
    CHECK(std::abs(mib(0, "weights") - log.weights0) < 0.005);
    CHECK(std::abs(mib(1, "weights") - log.weights1) < 0.005);
    CHECK(std::abs(mib(0, "compute_buffer") - log.buffer0) < 0.005);
    CHECK(std::abs(mib(1, "compute_buffer") - log.buffer1) < 0.005);  // the logits of 4,096
    CHECK(std::abs(j.at("host").at("compute_buffer").at("bytes").get<double>() / (1 << 20) -
                   log.host) < 0.005);
  }
}
