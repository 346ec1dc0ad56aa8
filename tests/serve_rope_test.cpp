// vLLM's rotary tables (src/serve/serve_rope.cpp): the cos/sin caches get_rope keeps as
// buffers, one per distinct setting, sized from the config by rope type.
#include "testutil.hpp"

#include <memest/serve.hpp>

#include <catch2/catch.hpp>

#include <fstream>

namespace {

using memest::test::data_path;
using memest::test::small_llama_config;

memest::ServeModel model_of_config(const std::string& text) {
  const memest::test::TempDir dir("serve-rope");  // one per process: ctest runs cases at once
  const auto path = dir.path / "config.json";
  std::ofstream(path) << text;
  return memest::load_serve_model("", path.string());
}

}  // namespace

TEST_CASE("vLLM: the rotary tables get_rope keeps, by rope type", "[serve]") {
  using memest::RopeTable;
  const auto one = [](const memest::ServeModel& m) {
    REQUIRE(m.rope.size() == 1);
    return m.rope[0];
  };
  // default: max_position_embeddings x head_dim.
  CHECK(one(model_of_config(small_llama_config(""))).positions == 4096);
  CHECK(one(model_of_config(small_llama_config(""))).rotary_dim == 64);
  // llama3 keeps max_position (Llama3RotaryEmbedding changes only the frequencies).
  const RopeTable l31 = one(memest::load_serve_model("llama-3.1-8b", ""));
  CHECK(l31.positions == 131072);
  CHECK(l31.rotary_dim == 128);
  // linear and dynamic: max_position x factor; yarn: the original length x factor.
  const RopeTable linear = one(model_of_config(
      small_llama_config(R"(, "rope_scaling": {"type": "linear", "factor": 4.0})")));
  CHECK(linear.positions == 4 * 4096);
  CHECK(linear.linear);
  CHECK(one(model_of_config(small_llama_config(
                R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                   "original_max_position_embeddings": 1024})")))
            .positions == 4 * 1024);
  // partial_rotary_factor: only part of each head rotates.
  CHECK(one(model_of_config(small_llama_config(R"(, "partial_rotary_factor": 0.5)"))).rotary_dim ==
        32);
  // A rope type not modelled (Phi-3's longrope) and learned positions (GPT-2): no table.
  CHECK(model_of_config(
            small_llama_config(R"(, "rope_scaling": {"type": "longrope", "short_factor": [1],
      "long_factor": [1], "original_max_position_embeddings": 1024})"))
            .rope.empty());
  CHECK(memest::load_serve_model("gpt2", "").rope.empty());
  // Gemma-3: the global layers' linear rope (factor 8) and the sliding layers' local one.
  const memest::ServeModel g =
      memest::load_serve_model("", data_path("data/inference/gemma-3-12b-it.json"));
  REQUIRE(g.rope.size() == 2);
  CHECK(g.rope[0].positions == 8 * 131072);
  CHECK(!g.rope[0].sliding);
  CHECK(g.rope[1].positions == 131072);
  CHECK(g.rope[1].sliding);
  CHECK(g.rope[1].rotary_dim == 256);
  // Its text_config names no pattern: Gemma3TextConfig's 6 makes 8 global layers of 48.
  CHECK(g.attention.full == 8);
  CHECK(g.attention.sliding == 40);
}
