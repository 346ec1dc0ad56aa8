// llama.cpp's KV cache against the start-up logs of tests/data/inference/cases.jsonl (its
// "KV self size" lines, exact in MiB) and against ggml's block sizes worked by hand.
#include "serve_cases.hpp"
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>

namespace {

using Json = nlohmann::json;

// llama.cpp's serve JSON document for `args`, which must be accepted.
Json llama_cpp_json(std::vector<std::string> args) {
  args.insert(args.begin(), {"serve", "--engine", "llama.cpp"});
  return memest::test::run_json(std::move(args));
}

namespace sc = memest::serve_cases;

// The run of tests/data/inference/runs.jsonl for the log `id`.
sc::Run lcpp_run(const std::string& id) {
  for (auto& run : sc::load_runs(memest::test::kRoot))
    if (run.id == id) return run;
  FAIL("no run " << id);
  return {};
}

// The printed figure `what` (at `device`, or the first) of a run's log.
const Json& lcpp_printed(const sc::Run& run, const std::string& what,
                         const std::string& device = "") {
  for (const Json& m : run.log.at("measured"))
    if (m.at("what") == what && (device.empty() || m.value("device", "") == device)) return m;
  FAIL("no printed " << what << " " << device);
  return run.log;
}

}  // namespace

TEST_CASE("llama.cpp: every KV figure of the published logs, exact to the printed MiB", "[serve]") {
  // The "KV self size" lines and each device's KV buffer under the layer split (load_tensors
  // puts each layer's K and V on its layer's device; equal devices unless --tensor-split says:
  // the RTX 5090 + 4090 run's 32 and 24 GB stand for their free memory), with the launch lines
  // of tests/data/inference/runs.jsonl. The models' KV shapes: open_llama_7b_v2 is
  // Llama-1-7B's, Mistral-7B-v0.2 has v0.1's layers and heads (llama.cpp keeps the whole
  // context on every layer either way), DeepSeek-R1 is DeepSeek-V3's; ik_llama.cpp's MLA cache
  // keeps 576 latent values per token and layer in q8_0 (34 bytes per 32).
  int checked = 0;
  for (const auto& run : sc::load_runs(memest::test::kRoot)) {
    if (run.engine != "llama.cpp") continue;
    const Json j = sc::estimate(run);
    for (const Json& m : run.log.at("measured")) {
      const std::string what = m.at("what");
      if (!what.starts_with("kv_") || !sc::kind_of(what)) continue;
      INFO(run.id << " " << sc::figure_name(m));
      // Printed in MiB with two decimals: exact to that rounding (1166.625 prints 1166.62), but
      // for the q8_0 MLA buffers of ik_llama.cpp's devices, which exceed their layers' K
      // tensors by 0.01-0.03 MiB (its buffer padding, not modelled: DeepSeek-V3's one RTX 4090
      // prints 1,166.65 MiB beside a KV self size of 1,166.62).
      const bool padded = run.id.find("mla-q8") != std::string::npos && m.contains("device");
      const double mib = std::abs(sc::memest_value(j, m) - sc::printed_value(m)) / (1 << 20);
      CHECK(mib <= (padded ? 0.03 : 0.0051));
      ++checked;
    }
  }
  CHECK(checked == 27);
}

TEST_CASE("llama.cpp: q8_0 blocks carry their scales", "[serve]") {
  // Llama-3.1-8B, 1,024 cells: K and V rows of 8 kv heads x 128 = 1,024 elements per cell,
  // 32,768 q8_0 blocks of 34 bytes (32 int8 + an fp16 scale) per layer and tensor.
  const Json q8 = llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "1024", "--flash-attn",
                                  "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"});
  CHECK(q8["kv_cache"]["bytes"] == 32 * 2 * (1024 * 1024 / 32) * 34);
  // q4_0: 18 bytes per 32; without flash attention the context pads to 32 cells, with it to 256.
  const Json q4 =
      llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "1000", "--cache-type-k", "q4_0"});
  CHECK(q4["context"] == 1024);
  CHECK(q4["kv_cache"]["bytes"] == 32 * ((1024 * 1024 / 32) * 18 + 1024 * 1024 * 2));
  const Json fa = llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "1000", "--flash-attn"});
  CHECK(fa["context"] == 1024);
  const Json fa2 =
      llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "1100", "--flash-attn"});
  CHECK(fa2["context"] == 1280);
}

TEST_CASE("llama.cpp: layers left on the CPU keep their KV cache there", "[serve]") {
  // DeepSeek-R1 without MLA, 512 cells: a layer's K is 128 heads x 192 and V 128 x 128 in f16,
  // 40 MiB; 3 of 61 layers offloaded put 120 MiB on the GPUs and 2,320 MiB in host memory.
  const Json j =
      llama_cpp_json({"--model", "deepseek-v3", "--ctx-size", "512", "--n-gpu-layers", "3"});
  CHECK(j["kv_cache"]["bytes"] == 3 * 40 * (1ULL << 20));
  CHECK(j["notes"][0] == "the KV cache of 58 layers (2320.00 MiB) stays in host memory");
}

TEST_CASE("llama.cpp: GGUF weights as the quantizer types each tensor", "[serve]") {
  const auto gpu_mib = [](const Json& j) {
    return j["weights"]["bytes"].get<double>() / (1 << 20);
  };
  // Q4_K_M gives q6_K to the output and to the attn_v and ffn_down of the layers use_more_bits
  // picks (the first and last eighth and every third between), q4_K to the rest; token_embd
  // stays in host memory. OpenLLaMA-7B's log: 193 q4_K + 33 q6_K tensors, "VRAM used =
  // 3820.93 MiB" (printed with two decimals). Phi-3-mini's fused QKV takes q5_K: 81 q4_K + 32
  // q5_K + 17 q6_K, "CUDA0 model buffer size = 2228.82 MiB".
  for (const char* id :
       {"lcpp-ci-openllama7b-q4km-v100-512", "lcpp-phi3-mini-4k-q4km-rtx3070-4k"}) {
    INFO(id);
    const sc::Run run = lcpp_run(id);
    const Json& m = lcpp_printed(run, "weights_bytes");
    CHECK(std::abs(sc::memest_value(sc::estimate(run), m) - sc::printed_value(m)) / (1 << 20) <
          0.006);
  }
  // Llama-3.1-8B Q5_K_S under ik_llama.cpp build 3475: 4941.00 MiB printed; memest's q5_K
  // everywhere with a q6_K output gives 4987.99 MiB (+0.95%): the file's own mix is not known.
  const Json q5 = sc::estimate(lcpp_run("ik-llama31-8b-q5ks-kiq4nl-vf16-1k"));
  CHECK(std::abs(gpu_mib(q5) / 4941.00 - 1) < 0.02);
  CHECK(q5["notes"][0] == "344.44 MiB of weights in host memory (token_embd)");
}

TEST_CASE("llama.cpp: Mixtral's first GGUF files, typed by the quantizer of December 2023",
          "[serve]") {
  // llama.cpp at caf5f9e6 (Mixtral's support merged) looked for "ffn_down.weight" in a tensor's
  // name; that month's files held each expert apart (blk.N.ffn_down.E.weight), so the experts'
  // ffn_down kept Q4_K_M's base q4_K, and attn_output had no eight-expert rule (q5_K later).
  // attn_k and attn_v already took q8_0 with eight experts, the output q6_K. Per layer: q, o and
  // 8 x 3 experts in q4_K (26 tensors), k and v in q8_0; token_embd q4_K.
  // The table's weights row gives the count of each type.
  const auto basis = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"serve",        "--engine",   "llama.cpp", "--model",
                                     "mixtral-8x7b", "--ctx-size", "2048",      "--quantization",
                                     "Q4_K_M",       "--device",   "CUDA0"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = memest::test::run_cli(args);
    REQUIRE(r.code == 0);
    const std::size_t at = r.out.find("Q4_K_M: ");
    REQUIRE(at != std::string::npos);
    return r.out.substr(at, r.out.find('\n', at) - at);
  };
  CHECK(basis({"--quantizer", "2023-12"}) == "Q4_K_M: 833 q4_K + 1 q6_K + 64 q8_0 tensors");
  // Today's rules give the experts' ffn_down of the 16 layers use_more_bits picks q6_K and
  // attn_output q5_K, and today's files stack a layer's eight experts into one tensor
  // (ffn_down_exps, ...): q, gate_exps, up_exps and 16 down_exps with token_embd are 113 q4_K,
  // 16 down_exps with the output 17 q6_K.
  CHECK(basis({}) == "Q4_K_M: 113 q4_K + 32 q5_K + 17 q6_K + 64 q8_0 tensors");
  // The December 2023 log prints 25,145.55 MiB of weights on the GPU.
  const sc::Run run = lcpp_run("lcpp-mixtral-8x7b-q4km-2k");
  const Json& m = lcpp_printed(run, "weights_bytes");
  CHECK(std::abs(sc::memest_value(sc::estimate(run), m) / sc::printed_value(m) - 1) < 0.001);
}

TEST_CASE("llama.cpp: the compute buffer of one micro-batch, exact where two moments are all",
          "[serve]") {
  // The printed "compute buffer size" of the device that holds the output layer (MiB), where
  // the two moments (the attention's and the output's) are all the graph holds at its peak:
  // Phi-3-mini's KQ of 4,096 x 256 x 32 heads with the fused QKV, and Qwen3-32B's logits of
  // 1,024 tokens under flash attention. serve_cases_test.cpp holds the others to the issue's
  // 20% (or to their listed miss).
  for (const char* id :
       {"lcpp-phi3-mini-4k-q4km-rtx3070-4k", "ik-qwen3-32b-q5kxl-2xT4-rowsplit-8k"}) {
    INFO(id);
    const sc::Run run = lcpp_run(id);
    const Json& m = lcpp_printed(run, "compute_buffer_bytes", "CUDA0");
    CHECK(sc::memest_value(sc::estimate(run), m) == sc::printed_value(m));
  }
}

TEST_CASE("llama.cpp: pipeline parallelism keeps four copies of each split's inputs", "[serve]") {
  // Qwen3-30B-A3B over two T4s (ik_llama.cpp build 3673, -fa, ctx 32768, ubatch 512): every
  // layer and the output offloaded under the layer split, so ggml_backend_sched keeps 4 copies
  // of each split's inputs, never freed. In MiB: the f32 KQ mask 32768 x 512 x 4 B = 64, its
  // f16 cast 32, a hidden state 2048 x 512 x 4 B = 4, an i32 input 512 x 4 B = 1/512.
  const double i32 = 1.0 / 512;
  // A layer's moments beside them: the attention (2 hidden states + Q 4096 wide + output 4096
  // wide = 8 + 8 + 8 MiB, and the mask) and the experts' down projection (ffn_inp, the gated
  // product 768 x 8 experts x 512 tokens x 4 B = 12 MiB and the output 2048 x 8 x 512 x 4 B =
  // 32 MiB: 48 MiB).
  const double experts = 4 + 12 + 32;
  // CUDA0 (layers 0-24): 4 x (inp_embd + KQ mask in f32 + inp_pos) from the CPU, the f16 cast it
  // makes, and the experts' moment. The log prints 368.01.
  const double cuda0 = 4 * (4 + 64 + i32) + 32 + experts;
  // CUDA1 (layers 25-47, the output): 4 x (the hidden state + the f16 mask from CUDA0 + inp_pos
  // + inp_out_ids), and the logits 151936 x 512 x 4 B beside 2 hidden states. Printed: 444.77.
  const double cuda1 = 4 * (4 + 32 + 2 * i32) + 151936.0 * 512 * 4 / 1048576 + 8;
  const Json j = sc::estimate(lcpp_run("ik-qwen3-30b-a3b-q4km-2xT4-32k"));
  CHECK(j["per_device"][0]["compute_buffer"]["bytes"].get<double>() / 1048576 == cuda0);
  CHECK(j["per_device"][1]["compute_buffer"]["bytes"].get<double>() / 1048576 == cuda1);
  CHECK(std::abs(cuda0 / 368.01 - 1) < 0.05);
  CHECK(std::abs(cuda1 / 444.77 - 1) < 0.02);
  // One copy (a build with GGML_SCHED_MAX_COPIES=1) keeps no copies: the moments only.
  std::vector<std::string> args = lcpp_run("ik-qwen3-30b-a3b-q4km-2xT4-32k").args;
  args.insert(args.end(), {"--sched-copies", "1"});
  const Json one = llama_cpp_json(args);
  // CUDA0: the attention with its own 32 MiB f16 mask, wider than the experts' moment.
  CHECK(one["per_device"][0]["compute_buffer"]["bytes"].get<double>() / 1048576 == 24 + 32);
  CHECK(one["per_device"][1]["compute_buffer"]["bytes"].get<double>() / 1048576 ==
        cuda1 - 4 * (4 + 32 + 2 * i32));
  // --override-tensor turns pipeline parallelism off (the newer builds' has_tensor_overrides).
  args.resize(args.size() - 2);
  args.insert(args.end(), {"--override-tensor", "exps=CPU"});
  const Json ot = llama_cpp_json(args);
  CHECK(ot["per_device"][0]["compute_buffer"]["bytes"] ==
        one["per_device"][0]["compute_buffer"]["bytes"]);
}

TEST_CASE("llama.cpp: the host's compute buffer holds the graph's inputs and inp_embd", "[serve]") {
  // The CPU backend keeps the inputs (the f32 KQ mask [n_kv x n_tokens padded to 32] and three
  // n_tokens i32 inputs) beside inp_embd [n_embd x n_tokens] f32. Phi-3-mini (4,096 cells, 256
  // tokens, n_embd 3072): 4 MiB + 3 KiB + 3 MiB; the log prints 7.00 MiB.
  const Json phi3 = sc::estimate(lcpp_run("lcpp-phi3-mini-4k-q4km-rtx3070-4k"));
  CHECK(phi3["host"]["compute_buffer"]["bytes"] == 4096 * 256 * 4 + 3 * 256 * 4 + 3072 * 256 * 4);
  // Qwen3-30B-A3B on two T4s, pipeline parallelism: 4 x (the 64 MiB mask + 3 x 2 KiB) + 4 MiB;
  // the log prints 260.02 MiB.
  const Json q = sc::estimate(lcpp_run("ik-qwen3-30b-a3b-q4km-2xT4-32k"));
  CHECK(q["host"]["compute_buffer"]["bytes"] ==
        4 * (32768 * 512 * 4 + 3 * 512 * 4) + 2048 * 512 * 4);
  // Layers left on the CPU compute there: not modelled.
  const Json cpu =
      llama_cpp_json({"--model", "llama-3.1-8b", "--n-gpu-layers", "20", "--device", "CUDA0"});
  CHECK(cpu["host"]["compute_buffer"]["bytes"].is_null());
}

TEST_CASE("llama.cpp: experts kept on the host and computed there fill its compute buffer",
          "[serve]") {
  // DeepSeek-V3 (n_embd 7168, 256 experts, 8 used, 2048 wide) at 512 tokens over 32,768 cells,
  // its experts in host memory (-ot exps=CPU). ik_llama.cpp leaves their matmuls on the host
  // below 32 x 256 / 8 = 1,024 tokens. ggml's allocator lays out the inputs first: the tokens and
  // positions (2 KiB each), the 64 MiB f32 mask, the output ids (2 KiB), then inp_embd (14 MiB)
  // past them. Once the first GPU split has copied them, all but the output ids are free, and
  // the block before the output ids is 64 MiB + 4 KiB.
  const std::uint64_t ids = 512 * 4, mask = 32768ULL * 512 * 4, inputs = 3 * ids + mask;
  const std::uint64_t in = 7168ULL * 512 * 4, down = 7168ULL * 8 * 512 * 4,
                      ff = 2048ULL * 8 * 512 * 4;
  const std::vector<std::string> launch = {
      "--model",      "deepseek-v3", "--ctx-size", "32768", "--flash-attn",      "--mla",
      "--batch-size", "2048",        "--device",   "CUDA0", "--override-tensor", "exps=CPU"};
  const auto host = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = launch;
    args.insert(args.end(), extra.begin(), extra.end());
    return llama_cpp_json(args)["host"]["compute_buffer"]["bytes"].get<std::uint64_t>();
  };
  // --fused-moe: the layer's copies of its input and expert ids and the gated product (46 MiB)
  // fit in that block; the down projection (112 MiB) does not and goes past the output ids. The
  // log prints 176.01 MiB.
  CHECK(in + 8 * 512 * 4 + ff < mask + 2 * ids);
  CHECK(host({"--ubatch-size", "512", "--fused-moe"}) == inputs + down);
  // The note names the 58 MoE layers (61 less the 3 dense ones) and the batch from which a GPU
  // takes them over.
  std::vector<std::string> args = launch;
  args.insert(args.end(), {"--ubatch-size", "512"});
  CHECK(llama_cpp_json(args)["notes"].back() ==
        "the host computes the experts of 58 MoE layers at 512 tokens (a GPU takes them over "
        "from 1024): their intermediates are in its compute buffer");
  // Without it, the up product fits there, the gate product goes past the output ids, the
  // product of the two (a new tensor in ik_llama.cpp) past that, and the down projection past
  // both: the holes the freed ones leave (14, 50 and 32 MiB) hold none of the later ones.
  CHECK(host({"--ubatch-size", "512"}) == inputs + 2 * ff + down);
  // From 1,024 tokens the GPU takes the matmuls over (copying the experts' weights): the host
  // holds the inputs and inp_embd only.
  const std::uint64_t ids2 = 1024 * 4, mask2 = 32768ULL * 1024 * 4;
  CHECK(host({"--ubatch-size", "1024", "--fused-moe"}) == 3 * ids2 + mask2 + 2 * in);
  args = launch;
  args.insert(args.end(), {"--ubatch-size", "1024"});
  CHECK(llama_cpp_json(args)["notes"].back() ==
        "a GPU computes the experts of 58 MoE layers kept in host memory at 1024 tokens, copying "
        "their weights in (not counted in its compute buffer)");
  // Mainline llama.cpp (no ik_llama.cpp flag) takes them over from 32 tokens, so at 512 tokens
  // the host holds the inputs and inp_embd; below 32 it computes them.
  const Json mainline = llama_cpp_json({"--model", "deepseek-v3", "--ctx-size", "32768",
                                        "--flash-attn", "--ubatch-size", "512", "--device", "CUDA0",
                                        "--override-tensor", "exps=CPU"});
  CHECK(mainline["host"]["compute_buffer"]["bytes"] == inputs + in);
  const Json small =
      llama_cpp_json({"--model", "deepseek-v3", "--ctx-size", "32768", "--flash-attn",
                      "--ubatch-size", "16", "--device", "CUDA0", "--override-tensor", "exps=CPU"});
  // 16 tokens: a 32-row mask (4 MiB) and 64-byte ids; the down projection (3.5 MiB) outgrows
  // the mask's block once the input, ids and up and gate products (2.4 MiB) are in it.
  CHECK(small["host"]["compute_buffer"]["bytes"] ==
        3 * 64 + 32768ULL * 32 * 4 + 7168ULL * 8 * 16 * 4);
  // Experts on a GPU, or a dense model: no change.
  const Json dense =
      llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "8192", "--ubatch-size", "512",
                      "--device", "CUDA0", "--override-tensor", "exps=CPU"});
  CHECK(dense["host"]["compute_buffer"]["bytes"] ==
        3 * ids + 8192ULL * 512 * 4 + 4096ULL * 512 * 4);
}

TEST_CASE("llama.cpp: --custom-q types the tensors its patterns find, over the file type's",
          "[serve]") {
  // Llama-3.1-8B's 32 ffn_down matrices (4,096 rows of 14,336) from Q8_0's q8_0 (34 bytes a 32)
  // to ik_llama.cpp's iq4_k (144 bytes a 256): 62,390,272 -> 33,030,144 bytes each.
  const std::vector<std::string> base = {"--model", "llama-3.1-8b", "--quantization",
                                         "Q8_0",    "--device",     "CUDA0"};
  auto custom = base;
  custom.insert(custom.end(), {"--custom-q", "ffn_down=iq4_k"});
  const auto weights = [](const Json& j) {
    return j.at("per_device").at(0).at("weights").at("bytes").get<std::uint64_t>();
  };
  const std::uint64_t q8 = 4096ULL * 14336 / 32 * 34, iq4k = 4096ULL * 14336 / 256 * 144;
  CHECK(weights(llama_cpp_json(base)) - weights(llama_cpp_json(custom)) == 32 * (q8 - iq4k));
  // The first pattern found wins (std::regex_search): blk.1's down is iq6_k, the others iq4_k.
  auto first = base;
  first.insert(first.end(), {"--custom-q", "blk\\.1\\.ffn_down=iq6_k,ffn_down=iq4_k"});
  const std::uint64_t iq6k = 4096ULL * 14336 / 256 * 212;
  CHECK(weights(llama_cpp_json(base)) - weights(llama_cpp_json(first)) ==
        31 * (q8 - iq4k) + (q8 - iq6k));
  // The weights' row counts the types: 7 matrices x 32 layers less the 32 down ones, with
  // token_embd and the output, in q8_0.
  const auto table =
      memest::test::run_cli({"serve", "--engine", "llama.cpp", "--model", "llama-3.1-8b",
                             "--quantization", "Q8_0", "--custom-q", "ffn_down=iq4_k"});
  CHECK(table.out.find("Q8_0: 32 iq4_k + 194 q8_0 tensors") != std::string::npos);
  // A layer's 128 experts are one stacked tensor a name: ubergarm's Qwen3-235B-A22B mix-IQ3_K
  // counts as llama_model_loader prints it (ik_llama.cpp issue 437: 2 q8_0, 188 iq3_k, 94 iq4_k
  // and 376 iq6_k tensors).
  const auto mix = memest::test::run_cli(
      {"serve", "--engine", "llama.cpp", "--config",
       memest::test::kRoot + "/tests/data/inference/qwen3-235b-a22b.json", "--quantization", "Q8_0",
       "--custom-q", "attn_(q|k|v|output)=iq6_k,ffn_(gate|up)_exps=iq3_k,ffn_down_exps=iq4_k"});
  CHECK(mix.out.find("Q8_0: 188 iq3_k + 94 iq4_k + 376 iq6_k + 2 q8_0 tensors") !=
        std::string::npos);
}

TEST_CASE("ik_llama.cpp: a GPU's copies of host-kept weights, as the Qwen3-235B log prints them",
          "[serve]") {
  // ubergarm's mix-IQ3_K over an RTX 5090 and a 4090, the experts of layers 34-93 and their
  // norms and routers in host memory (-ot), 2,048 tokens: CUDA0 takes their ops over, copying
  // each op's weights into its compute buffer (the fused up and gate experts 660 MiB, the down
  // ones 432 MiB) and freeing them after it. Printed: CUDA0 1,264.01 MiB, CUDA1 1,251.00 (the
  // logits of 2,048 tokens, where no copy goes).
  const sc::Run run = lcpp_run("ik-qwen3-235b-iq3k-5090-4090-32k-f16kv");
  const Json j = sc::estimate(run);
  for (const char* device : {"CUDA0", "CUDA1"}) {
    INFO(device);
    const Json& m = lcpp_printed(run, "compute_buffer_bytes", device);
    CHECK(std::abs(sc::memest_value(j, m) - sc::printed_value(m)) / (1 << 20) < 0.005);
  }
  CHECK(j.at("notes").at(1) ==
        "a GPU computes the experts of 60 MoE layers kept in host memory at 2048 tokens, copying "
        "their weights in (one op's at a time, in its compute buffer)");
  // The closed form without the copies gave 384 MiB: the experts' outputs and the residual.
  CHECK(j.at("per_device").at(0).at("compute_buffer").at("bytes").get<double>() >
        (384.0 + 432.0) * (1 << 20));
}

TEST_CASE("llama.cpp: experts kept in host memory that a GPU takes over run on the first GPU",
          "[serve]") {
  // Qwen3-30B-A3B over three devices at 512 tokens with flash attention, 4,096 cells. A MoE
  // layer's moment: the residual (2,048 x 512 f32, 4 MiB) beside the 8 experts' 768 + 2,048
  // wide outputs (44 MiB): 48 MiB; the attention's: the two hidden states (8 MiB), Q and the
  // output (4,096 wide each, 16 MiB) and the f16 mask (4,096 x 512, 4 MiB): 28 MiB.
  const std::uint64_t moe = 2048ULL * 512 * 4 + (768ULL + 2048) * 8 * 512 * 4;
  const std::uint64_t attention = 2 * 2048ULL * 512 * 4 + 2 * 4096ULL * 512 * 4 + 4096ULL * 512 * 2;
  const auto buffers = [](const char* flag, const char* value) {
    const Json j =
        llama_cpp_json({"--model", "qwen3-30b-a3b", "--ctx-size", "4096", "--flash-attn",
                        "--ubatch-size", "512", "--device", "CUDA0,CUDA1,CUDA2", flag, value});
    std::vector<std::uint64_t> out;
    for (const Json& d : j.at("per_device")) out.push_back(d.at("compute_buffer").at("bytes"));
    return out;
  };
  // Each device computes its own layers' experts (pipeline copies off).
  CHECK(buffers("--sched-copies", "1")[1] == moe);
  // With the experts in host memory, 512 tokens is past mainline's 32: the first GPU
  // (ggml_backend_sched_backend_id_from_cur tries the backends in order) computes every
  // layer's, so CUDA1 holds its attention only.
  const auto host = buffers("--override-tensor", "exps=CPU");
  CHECK(host[0] == moe);
  CHECK(host[1] == attention);
  // The table's basis is the fullest device's moment: CUDA1 with most layers names the
  // attention's, not the experts' it no longer holds.
  const auto table = memest::test::run_cli(
      {"serve", "--engine", "llama.cpp", "--model", "qwen3-30b-a3b", "--ctx-size", "4096",
       "--flash-attn", "--ubatch-size", "512", "--device", "CUDA0,CUDA1,CUDA2", "--tensor-split",
       "1,8,1", "--override-tensor", "exps=CPU"});
  CHECK(table.out.find("compute buffer             0.03 GiB  the attention's inputs and output") !=
        std::string::npos);
}
