// llama.cpp's KV cache against the start-up logs of tests/data/inference/cases.jsonl (its
// "KV self size" lines, exact in MiB) and against ggml's block sizes worked by hand.
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>

namespace {

using memest::test::data_path;
using Json = nlohmann::json;

// llama.cpp's serve JSON document for `args`, which must be accepted.
Json llama_cpp_json(std::vector<std::string> args) {
  args.insert(args.begin(), {"serve", "--engine", "llama.cpp"});
  return memest::test::run_json(std::move(args));
}

double printed_kv(const std::string& id) {
  std::ifstream in(data_path("data/inference/cases.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const Json c = Json::parse(line);
    if (c.at("id") != id) continue;
    for (const Json& m : c.at("measured")) {
      if (m.at("what") == "kv_cache_bytes") return m.at("bytes").get<double>();
    }
  }
  FAIL("no kv_cache_bytes for " << id);
  return 0;
}

}  // namespace

TEST_CASE("llama.cpp: the KV cache of the published logs, exact to the printed MiB", "[serve]") {
  const std::string data = data_path("data/inference/");
  struct Case {
    std::string id;
    std::vector<std::string> args;
  };
  // The models' KV shapes: open_llama_7b_v2 is Llama-1-7B's, Mistral-7B-v0.2 has v0.1's layers
  // and heads (llama.cpp keeps the whole context on every layer either way), DeepSeek-R1 is
  // DeepSeek-V3's.
  const std::vector<Case> cases = {
      {"lcpp-ci-openllama7b-q4km-v100-512", {"--model", "llama-1-7b", "--ctx-size", "512"}},
      {"lcpp-phi3-mini-4k-q4km-rtx3070-4k",
       {"--model", "phi-3-mini-4k-instruct", "--ctx-size", "4096"}},
      {"lcpp-mistral7b-v02-q4ks-2k", {"--model", "mistral-7b-v0.1", "--ctx-size", "2048"}},
      {"lcpp-mixtral-8x7b-q4km-2k", {"--model", "mixtral-8x7b", "--ctx-size", "2048"}},
      {"ik-qwen3-235b-iq3k-5090-4090-32k-f16kv",
       {"--config", data + "qwen3-235b-a22b.json", "--ctx-size", "32768", "--flash-attn"}},
      {"ik-deepseek-r1-f16-3x3090-512-nomla", {"--model", "deepseek-v3", "--ctx-size", "512"}},
      {"ik-qwen3-30b-a3b-q4km-2xT4-32k",
       {"--model", "qwen3-30b-a3b", "--ctx-size", "32768", "--flash-attn"}},
      {"ik-qwen3-32b-q5kxl-2xT4-rowsplit-8k",
       {"--model", "qwen3-32b", "--ctx-size", "8192", "--flash-attn"}},
      // ik_llama.cpp's MLA cache: 576 latent values per token and layer in q8_0 (34 bytes per 32).
      {"ik-deepseek-v3-iq4kr4-4090-32k-mla-q8",
       {"--model", "deepseek-v3", "--ctx-size", "32768", "--flash-attn", "--mla", "--cache-type-k",
        "q8_0"}},
      {"ik-deepseek-r1-0528-iq2kr4-3x3090-150k-mla-q8",
       {"--model", "deepseek-v3", "--ctx-size", "153600", "--flash-attn", "--mla", "--cache-type-k",
        "q8_0"}},
      {"ik-llama31-8b-q5ks-kiq4nl-vf16-1k",
       {"--model", "llama-3.1-8b", "--ctx-size", "1024", "--cache-type-k", "iq4_nl"}},
  };
  for (const Case& c : cases) {
    INFO(c.id);
    const Json j = llama_cpp_json(c.args);
    // The logs print MiB with two decimals: exact to that rounding (1166.625 prints 1166.62).
    CHECK(std::abs(j["kv_cache"]["bytes"].get<double>() - printed_kv(c.id)) / (1 << 20) <= 0.0051);
  }
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
  // 3820.93 MiB" (printed with two decimals).
  const Json llama =
      llama_cpp_json({"--model", "llama-1-7b", "--ctx-size", "512", "--quantization", "Q4_K_M"});
  CHECK(std::abs(gpu_mib(llama) - 3820.93) < 0.006);
  // Phi-3-mini's fused QKV takes q5_K: 81 q4_K + 32 q5_K + 17 q6_K, "CUDA0 model buffer size =
  // 2228.82 MiB".
  const Json phi = llama_cpp_json(
      {"--model", "phi-3-mini-4k-instruct", "--ctx-size", "4096", "--quantization", "Q4_K_M"});
  CHECK(std::abs(gpu_mib(phi) - 2228.82) < 0.006);
  // Llama-3.1-8B Q5_K_S under ik_llama.cpp build 3475: 4941.00 MiB printed; memest's q5_K
  // everywhere with a q6_K output gives 4987.99 MiB (+0.95%): the file's own mix is not known.
  const Json q5 = llama_cpp_json({"--model", "llama-3.1-8b", "--ctx-size", "1024", "--quantization",
                                  "Q5_K_S", "--cache-type-k", "iq4_nl"});
  CHECK(std::abs(gpu_mib(q5) / 4941.00 - 1) < 0.02);
  CHECK(q5["notes"][0] == "344.44 MiB of weights in host memory (token_embd)");
}

TEST_CASE("llama.cpp: Mixtral's Dec 2023 Q4_K_M file is not the mix memest types (unmet)",
          "[serve]") {
  // The log prints 25145.55 MiB on the GPU; the rules read (llama-quant.cpp at 007dbbf3: q6_K
  // for the experts' ffn_down in the use_more_bits layers, q8_0 for attn_k and attn_v and q5_K
  // for attn_output with 8 experts) give 27059.55 MiB. The quantizer of December 2023 typed
  // the experts otherwise; its source was not read, and no constant is fitted to the case.
  const Json j =
      llama_cpp_json({"--model", "mixtral-8x7b", "--ctx-size", "2048", "--quantization", "Q4_K_M"});
  CHECK(j["weights"]["bytes"].get<double>() / (1 << 20) / 25145.55 - 1 > 0.02);
}

TEST_CASE("llama.cpp: the compute buffer of one micro-batch, against the logs", "[serve]") {
  // The printed "compute buffer size" of the device that holds the output layer (MiB). Where
  // the logs print exactly what the two moments give, the check is to the printed decimals;
  // the tolerance is 20%.
  struct Case {
    std::vector<std::string> args;
    double printed;
  };
  const std::string data = data_path("data/inference/");
  const std::vector<Case> cases = {
      // lcpp-ci-openllama7b-q4km-v100-512: the logits of 512 tokens (build 1707, +6.5%).
      {{"--model", "llama-1-7b", "--ctx-size", "512", "--batch-size", "512"}, 73.69},
      // lcpp-phi3-mini-4k-q4km-rtx3070-4k: KQ of 4,096 x 256 x 32 heads, the fused QKV.
      {{"--model", "phi-3-mini-4k-instruct", "--ctx-size", "4096", "--batch-size", "256",
        "--ubatch-size", "256"},
       150.00},
      // lcpp-mistral7b-v02-q4ks-2k: KQ of 2,048 x 512 x 32 heads.
      {{"--model", "mistral-7b-v0.1", "--ctx-size", "2048", "--batch-size", "512"}, 164.00},
      // ik-llama31-8b-q5ks-kiq4nl-vf16-1k: the logits of 512 tokens x 128,256.
      {{"--model", "llama-3.1-8b", "--ctx-size", "1024", "--batch-size", "1024", "--cache-type-k",
        "iq4_nl"},
       266.50},
      // ik-qwen3-32b-q5kxl-2xT4-rowsplit-8k: flash attention, the logits of 1,024 tokens.
      {{"--model", "qwen3-32b", "--ctx-size", "8192", "--batch-size", "4096", "--ubatch-size",
        "1024", "--flash-attn"},
       633.50},
      // ik-qwen3-235b-iq3k-5090-4090-32k-f16kv: the second GPU, which holds the output.
      {{"--config", data + "qwen3-235b-a22b.json", "--ctx-size", "32768", "--batch-size", "4096",
        "--ubatch-size", "2048", "--flash-attn"},
       1251.00},
      // ik-deepseek-r1-f16-3x3090-512-nomla: one layer per GPU, 31 tokens, no output (-10.6%).
      {{"--model", "deepseek-v3", "--ctx-size", "512", "--batch-size", "32", "--ubatch-size", "31",
        "--n-gpu-layers", "3"},
       17.14},
  };
  for (const Case& c : cases) {
    INFO(c.args[1]);
    const double mib = llama_cpp_json(c.args)["compute_buffer"]["bytes"].get<double>() / (1 << 20);
    CHECK(std::abs(mib / c.printed - 1) < 0.20);
  }
  // Exact where the two moments are all the graph holds at its peak.
  CHECK(llama_cpp_json(cases[1].args)["compute_buffer"]["bytes"] == 150ULL << 20);
  CHECK(llama_cpp_json(cases[4].args)["compute_buffer"]["bytes"] == 633.5 * (1 << 20));
}

TEST_CASE("llama.cpp: MoE and MLA compute buffers are outside the model (unmet)", "[serve]") {
  // ik-qwen3-30b-a3b-q4km-2xT4-32k prints 444.77 MiB where the logits and hidden states give
  // 304.75 (-31%): the experts' intermediates are not modelled. ik-deepseek-v3's MLA attention
  // (-mla 3) prints 3,425 MiB against 280.50.
  const Json moe = llama_cpp_json({"--model", "qwen3-30b-a3b", "--ctx-size", "32768",
                                   "--batch-size", "2048", "--ubatch-size", "512", "--flash-attn"});
  CHECK(moe["compute_buffer"]["bytes"].get<double>() / (1 << 20) / 444.77 - 1 < -0.20);
}

TEST_CASE("llama.cpp: each GPU's KV buffer of the multi-GPU logs, exact to the printed MiB",
          "[serve]") {
  // The layer split as load_tensors makes it: equal devices unless --tensor-split says (the
  // RTX 5090 + 4090 run's 32 and 24 GB stand for their free memory); each layer's K and V on
  // its layer's device.
  const std::string data = data_path("data/inference/");
  struct Case {
    std::string id;
    std::vector<std::string> args;
  };
  const std::vector<Case> cases = {
      {"lcpp-deepseek-r1-8gpu-kq40-vf16-16k-nomla",
       {"--model", "deepseek-v3", "--ctx-size", "16384", "--cache-type-k", "q4_0", "--device",
        "CUDA0,CUDA1,CUDA2,CUDA3,CUDA4,CUDA5,CUDA6,CUDA7"}},
      {"ik-qwen3-235b-iq3k-5090-4090-32k-f16kv",
       {"--config", data + "qwen3-235b-a22b.json", "--ctx-size", "32768", "--flash-attn",
        "--device", "CUDA0,CUDA1", "--tensor-split", "32,24"}},
      {"ik-deepseek-r1-f16-3x3090-512-nomla",
       {"--model", "deepseek-v3", "--ctx-size", "512", "--n-gpu-layers", "3", "--device",
        "CUDA0,CUDA1,CUDA2"}},
      {"ik-qwen3-30b-a3b-q4km-2xT4-32k",
       {"--model", "qwen3-30b-a3b", "--ctx-size", "32768", "--flash-attn", "--device",
        "CUDA0,CUDA1"}},
      {"ik-deepseek-r1-0528-iq2kr4-3x3090-150k-mla-q8",
       {"--model", "deepseek-v3", "--ctx-size", "153600", "--flash-attn", "--mla", "--cache-type-k",
        "q8_0", "--device", "CUDA0,CUDA1,CUDA2"}},
  };
  std::ifstream in(data_path("data/inference/cases.jsonl"));
  std::map<std::string, Json> logs;
  for (std::string line; std::getline(in, line);) {
    const Json c = Json::parse(line);
    logs[c.at("id")] = c;
  }
  int checked = 0;
  for (const Case& c : cases) {
    INFO(c.id);
    const Json j = llama_cpp_json(c.args);
    for (const Json& m : logs.at(c.id).at("measured")) {
      const std::string what = m.at("what");
      if (what != "kv_buffer_bytes_device" && what != "kv_cache_bytes_device" &&
          what != "kv_buffer_bytes_host") {
        continue;
      }
      const std::string device = m.at("device");
      double bytes = j["host"]["kv_cache"]["bytes"].get<double>();
      if (device.starts_with("CUDA") && device != "CUDA_Host") {
        bytes = j["per_device"][std::stoul(device.substr(4))]["kv_cache"]["bytes"].get<double>();
      }
      INFO(device);
      // Exact to the printed two decimals, but for the q8_0 MLA buffers of ik_llama.cpp, which
      // exceed their layers' K tensors by 0.01-0.02 MiB (its buffer padding, not modelled).
      const double slack = c.id.find("mla-q8") != std::string::npos ? 0.02 : 0.0051;
      CHECK(std::abs(bytes - m.at("bytes").get<double>()) / (1 << 20) <= slack);
      ++checked;
    }
  }
  CHECK(checked == 15);
}
