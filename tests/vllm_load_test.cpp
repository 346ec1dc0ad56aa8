// What vLLM's "Model loading took" counts beyond the parameters: the rotary tables get_rope
// keeps (rotary_embedding/base.py, register_buffer("cos_sin_cache")) and the caching
// allocator's whole blocks (c10/cuda/CUDACachingAllocator.cpp: a request of 10 MiB or more gets
// a segment rounded up to 2 MiB, split only when over 1 MiB is left). Every expected byte is
// derived here from the config's shapes.
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

namespace {

using memest::test::data_path;
using memest::test::run_cli;
using memest::test::small_llama_config;
using Json = nlohmann::json;
using u64 = std::uint64_t;

constexpr u64 kMiB = u64{1} << 20;

u64 weights(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  args.insert(args.end(), {"--max-model-len", "8192", "--format", "json"});
  const auto r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return Json::parse(r.out)["weights"]["bytes"].get<u64>();
}

}  // namespace

TEST_CASE("vLLM weights: small tensors take exact blocks, plus the rotary table", "[serve]") {
  // Every tensor of the small Llama is at most 1 MiB: small-pool blocks of its own size.
  const u64 layer = (256 + 2 * 128) * 256 + 256 * 256 + 2 * 512 * 256 + 256 * 512 + 2 * 256;
  const u64 params = 2 * layer + 2 * 1024 * 256 + 256;
  const memest::test::TempDir dir("serve-small");
  const auto path = dir.path / "config.json";
  std::ofstream(path) << small_llama_config("");
  CHECK(weights({"--config", path.string()}) == 2 * params + 4096 * 64 * 2);
}

TEST_CASE("vLLM weights: tensors whose 2 MiB rounding leaves at most 1 MiB keep the block",
          "[serve]") {
  SECTION("Phi-4: qkv (75 MiB) and down (175 MiB) each take a block 1 MiB larger") {
    const u64 h = 5120;
    const u64 qkv = (5120 + 2 * 10 * 128) * h, o = h * h, gate_up = 2 * 17920 * h;
    const u64 down = h * 17920;
    REQUIRE(2 * qkv == 75 * kMiB);
    REQUIRE(2 * down == 175 * kMiB);
    const u64 layer = qkv + o + gate_up + down + 2 * h;
    const u64 params = 40 * layer + 2 * 100352 * h + h;
    const u64 slack = 40 * (kMiB + kMiB);
    const u64 rope = 16384 * 128 * 2;
    CHECK(weights({"--model", "phi-4"}) == 2 * params + slack + rope);
  }
  SECTION("Qwen2.5-7B-Instruct: qkv, gate_up, down, the embedding and the lm_head") {
    const u64 h = 3584;
    const u64 qkv = (3584 + 2 * 512) * h, o = h * h, gate_up = 2 * 18944 * h, down = 18944 * h;
    const u64 layer = qkv + (3584 + 2 * 512) + o + gate_up + down + 2 * h;
    const u64 params = 28 * layer + 2 * 152064 * h + h;
    // 31.5 MiB in a 32 MiB segment, 259 in 260, 129.5 in 130: the remainders stay. o's 24.5 MiB
    // leaves 1.5 MiB of its 26 MiB segment: split off, and no later request fits in it.
    const u64 slack = 28 * (kMiB / 2 + kMiB + kMiB / 2) + 2 * (kMiB / 2);
    const u64 rope = 32768 * 128 * 2;
    CHECK(weights({"--config", data_path("data/inference/qwen2.5-7b-instruct.json")}) ==
          2 * params + slack + rope);
  }
}

TEST_CASE("vLLM weights: Gemma-3's vision tower, projector and two rotary tables", "[serve]") {
  // The Hub's safetensors totals (tests/data/models/SOURCES.md), text + SigLIP + projector, in
  // bf16; the tables: 8 x 131072 and 131072 positions of head_dim; the allocator's slack is at
  // most 1 MiB for each tensor over 1 MiB (27 tower layers' qkv, out, fc1 and fc2, its
  // patch and position embeddings and the projector; 4 per text layer and the embedding).
  const auto check = [](const std::string& file, u64 total, u64 head_dim, u64 layers) {
    const u64 w = weights({"--config", data_path("data/inference/" + file)});
    const u64 floor = 2 * total + 9 * 131072 * head_dim * 2;
    CHECK(w >= floor);
    CHECK(w - floor <= (27 * 4 + 3 + 4 * layers + 1) * kMiB);
  };
  check("gemma-3-12b-it.json", 12'187'325'040, 256, 48);
  check("gemma-3-27b-it.json", 27'432'406'640, 128, 62);
}
