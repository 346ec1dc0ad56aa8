// ik_llama.cpp's MLA prompt graph (src/serve/ik_mla_graph.cpp): when the path is taken, how the
// heads are grouped, what the buffers come to against the published logs, and the graph's node
// limit.
#include "serve/ik_mla_graph.hpp"

#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::json;
constexpr double kMiB = 1024.0 * 1024.0;

// DeepSeek-V3 under ik_llama.cpp with the MLA cache, flash attention and its experts in host
// memory, as both logs launch it, with `extra` flags.
Json deepseek(std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "serve", "--engine",       "llama.cpp", "--model",           "deepseek-v3", "--flash-attn",
      "--mla", "--cache-type-k", "q8_0",      "--override-tensor", "exps=CPU",    "--fused-moe"};
  args.insert(args.end(), extra.begin(), extra.end());
  return memest::test::run_json(args);
}

double device_mib(const Json& j, std::size_t i) {
  return j.at("per_device").at(i).at("compute_buffer").at("bytes").get<double>() / kMiB;
}

}  // namespace

TEST_CASE("ik_llama.cpp: an MLA layer's heads are grouped by --attention-max-batch", "[serve]") {
  memest::Architecture a;
  a.num_heads = 128;
  a.qk_nope_head_dim = 128;
  a.v_head_dim = 128;
  // 128 heads x 256 x 32,768 cells x 4 bytes = 4,096 MiB: halved to 2,048, 1,024, 512 MiB.
  CHECK(memest::mla_group_heads(a, 512, 32768) == 16);
  CHECK(memest::mla_group_heads(a, 0, 32768) == 128);     // no limit: one group
  CHECK(memest::mla_group_heads(a, 5000, 32768) == 128);  // already within it
  // 153,600 cells: 19,200 MiB, halved six times to 300 MiB.
  CHECK(memest::mla_group_heads(a, 512, 153600) == 2);
  a.num_heads = 24;  // 24 -> 12 -> 6 -> 3: odd, no further
  CHECK(memest::mla_group_heads(a, 1, 32768) == 3);
}

TEST_CASE("ik_llama.cpp: the MLA prompt path needs --mla, flash attention and 128 tokens",
          "[serve]") {
  memest::Architecture a;
  a.kv_lora_rank = 512;
  memest::LlamaCppSettings s;
  s.mla = true;
  s.flash_attn = true;
  memest::LlamaCppPlacement p;
  CHECK(memest::mla_prompt_path(a, s, p, 128));
  CHECK_FALSE(memest::mla_prompt_path(a, s, p, 127));  // pp_opt: n_tokens >= 128
  p.row = true;
  CHECK_FALSE(memest::mla_prompt_path(a, s, p, 512));
  p.row = false;
  s.flash_attn = false;
  CHECK_FALSE(memest::mla_prompt_path(a, s, p, 512));
  s.flash_attn = true;
  a.kv_lora_rank = 0;
  CHECK_FALSE(memest::mla_prompt_path(a, s, p, 512));
}

TEST_CASE("ik_llama.cpp: MLA prompt buffers as the published logs print them", "[serve]") {
  // The runs of ik_llama.cpp discussions #258 (one RTX 4090, 512 tokens over 32,768 cells,
  // -amb 512: 8 groups of 16 heads) and the R1-0528 one (three RTX 3090, 4,096 tokens over
  // 153,600 cells, -amb 512: 64 groups of 2 heads; the GPUs compute the experts at that batch):
  // each device's buffer to the MiB printed with two decimals.
  const Json v3 = deepseek({"--ctx-size", "32768", "--batch-size", "2048", "--ubatch-size", "512",
                            "--attention-max-batch", "512", "--device", "CUDA0"});
  CHECK(std::abs(device_mib(v3, 0) - 3425.00) < 0.005);
  const Json r1 = deepseek({"--ctx-size", "153600", "--batch-size", "4096", "--ubatch-size", "4096",
                            "--attention-max-batch", "512", "--device", "CUDA0,CUDA1,CUDA2",
                            "--sched-copies", "1"});
  CHECK(std::abs(device_mib(r1, 0) - 16257.02) < 0.005);
  CHECK(std::abs(device_mib(r1, 1) - 14157.02) < 0.005);
  CHECK(std::abs(device_mib(r1, 2) - 14157.02) < 0.005);
  // Every head's f16 keys and values are made before the first attention: 128 heads x 32,768
  // cells x (192 + 128) x 2 bytes = 2,560 MiB live together, beside the last group's f32
  // product (16 heads x 256 x 32,768 x 4 = 512 MiB) when its values are cast.
  CHECK(device_mib(v3, 0) > 2560.0 + 512.0);
  const auto table = memest::test::run_cli({"serve", "--engine", "llama.cpp", "--model",
                                            "deepseek-v3", "--flash-attn", "--mla", "--ctx-size",
                                            "32768", "--attention-max-batch", "512"});
  CHECK(table.out.find("keys and values of 128 heads x 32768 cells in f16 (8 groups of 16), all "
                       "made before the first flash attention") != std::string::npos);
  // DeepSeek-V2-Lite at 8,192 cells: its 16 heads' keys and values (16 x 8,192 x 320 x 2 bytes,
  // 80 MiB) weigh less than the logits of 512 tokens over 102,400 words in f32 (200 MiB).
  const auto lite =
      memest::test::run_cli({"serve", "--engine", "llama.cpp", "--model", "deepseek-v2-lite",
                             "--flash-attn", "--mla", "--ctx-size", "8192"});
  CHECK(lite.out.find("logits of 512 tokens x 102400 vocab in f32") != std::string::npos);
}

TEST_CASE("ik_llama.cpp: a graph past its node limit is refused", "[serve]") {
  // 1,048,576 cells with -amb 1: one head a group, 61 layers x 128 groups of 5 nodes and more:
  // past llama_model_max_nodes (65,536), where ik_llama.cpp aborts.
  const auto r = memest::test::run_cli({"serve", "--engine", "llama.cpp", "--model", "deepseek-v3",
                                        "--ctx-size", "1048576", "--flash-attn", "--mla",
                                        "--attention-max-batch", "1"});
  CHECK(r.code == 2);
  CHECK(
      r.err.starts_with("memest: error: --attention-max-batch: ik_llama.cpp's graph holds at "
                        "most 65536 nodes"));
  // Off the path the flag changes nothing modelled, and says so.
  const Json off =
      deepseek({"--ctx-size", "4096", "--ubatch-size", "64", "--attention-max-batch", "512"});
  CHECK(off.at("notes").at(0) ==
        "--attention-max-batch is modelled on ik_llama.cpp's MLA prompt path only (--mla, "
        "--flash-attn, 128 tokens or more); its split of other attention is not");
}

TEST_CASE("ik_llama.cpp: five held-out MLA logs of issue 437, as printed", "[serve]") {
  // ikawrakow/ik_llama.cpp issue 437 (mtcl, 2025-06-09 06:09-06:59, build 3737 58f08e43, built
  // with GGML_SCHED_MAX_COPIES=1; the archived thread at github-data/issues of commit 8337e4cd):
  // ubergarm's DeepSeek-R1-0528 IQ3_K_R4 on two RTX 4090s, -ctk q8_0 -mla 3 -fa -amb 512 -fmoe
  // -ngl 63 --override-tensor exps=CPU, four of them with layer 3's ffn on CUDA0 and 5's on
  // CUDA1 first. Not used to build the graph. At these batches the first GPU takes the host's
  // experts over, every layer's, CUDA1's too (their weights' copies are not held here; the
  // figures match without them).
  struct Printed {
    const char* ctx;
    const char* ubatch;
    bool moved;  // -ot blk.3 to CUDA0, blk.5 to CUDA1
    double cuda0, cuda1, host;
  };
  // The 65,536-cell launch failed: "allocating 7688.02 MiB on device 0", CUDA0's buffer (the
  // others not printed: 0, not compared). With CUDA1's experts left on CUDA1, its buffer at
  // 32,768 cells and 4,096 tokens came to 4,240.03 MiB: their 64 MiB more.
  for (const Printed& log : {Printed{"32768", "2048", true, 3588.01, 3560.02, 312.02},
                             Printed{"32768", "4096", true, 4104.02, 4176.03, 624.05},
                             Printed{"65536", "4096", true, 7688.02, 0, 0},
                             Printed{"61440", "4096", true, 7272.02, 6632.03, 1072.05},
                             Printed{"61440", "4096", false, 7272.02, 6632.03, 1072.05}}) {
    INFO(log.ctx << " cells, " << log.ubatch << " tokens, moved " << log.moved);
    const Json j = memest::test::run_json(
        {"serve",
         "--engine",
         "llama.cpp",
         "--model",
         "deepseek-v3",
         "--flash-attn",
         "--mla",
         "--cache-type-k",
         "q8_0",
         "--fused-moe",
         "--ctx-size",
         log.ctx,
         "--batch-size",
         log.ubatch,
         "--ubatch-size",
         log.ubatch,
         "--attention-max-batch",
         "512",
         "--n-gpu-layers",
         "63",
         "--device",
         "CUDA0,CUDA1",
         "--sched-copies",
         "1",
         "--override-tensor",
         log.moved ? "blk\\.(3)\\.ffn_.*=CUDA0,blk\\.(5)\\.ffn_.*=CUDA1,exps=CPU" : "exps=CPU"});
    CHECK(std::abs(device_mib(j, 0) - log.cuda0) < 0.005);
    if (log.cuda1 > 0) CHECK(std::abs(device_mib(j, 1) - log.cuda1) < 0.005);
    const double host = j.at("host").at("compute_buffer").at("bytes").get<double>() / kMiB;
    if (log.host > 0) CHECK(std::abs(host - log.host) < 0.005);
  }
}
