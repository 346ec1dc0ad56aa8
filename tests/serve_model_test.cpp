// The attention facts `memest serve` reads from a config.json beside the training shapes.
#include <memest/error.hpp>
#include <memest/serve.hpp>

#include <catch2/catch.hpp>

using memest::AttentionLayers;
using memest::read_attention_layers;

namespace {

AttentionLayers layers(const std::string& json, std::uint64_t n) {
  return read_attention_layers(json, "t.json", n);
}

}  // namespace

TEST_CASE("serve: which layers slide, as each family's config says", "[serve]") {
  // No window: every layer full.
  CHECK(layers(R"({"model_type": "llama"})", 32).full == 32);
  // Qwen2 states a window it does not use.
  const auto qwen = layers(R"({"sliding_window": 131072, "use_sliding_window": false})", 28);
  CHECK((qwen.full == 28 && qwen.sliding == 0));
  // Gemma-2 alternates: 42 layers, 21 of each.
  const auto g2 = layers(R"({"model_type": "gemma2", "sliding_window": 4096})", 42);
  CHECK((g2.full == 21 && g2.sliding == 21 && g2.window == 4096));
  // Gemma-3: every 6th layer global, in text_config of a multimodal config.
  const auto g3 = layers(
      R"({"text_config": {"model_type": "gemma3_text", "sliding_window": 1024,
          "sliding_window_pattern": 6}})",
      62);
  CHECK((g3.full == 10 && g3.sliding == 52 && g3.window == 1024));
  // layer_types, when given, decides.
  const auto lt = layers(
      R"({"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention",
          "sliding_attention"]})",
      3);
  CHECK((lt.full == 1 && lt.sliding == 2 && lt.window == 128));
  // Mistral-7B-v0.1: a window on every layer.
  const auto mistral = layers(R"({"model_type": "mistral", "sliding_window": 4096})", 32);
  CHECK((mistral.sliding == 32 && mistral.full == 0));
}

TEST_CASE("serve: a bad attention key names the file and key", "[serve]") {
  CHECK_THROWS_WITH(layers(R"({"sliding_window": -1})", 4),
                    "t.json: /sliding_window: expected a positive integer, got -1");
  CHECK_THROWS_WITH(layers(R"({"sliding_window": 8, "layer_types": ["full_attention"]})", 4),
                    "t.json: /layer_types: expected an array of 4 layer types, got 1");
  CHECK_THROWS_WITH(layers("{", 4), "t.json: invalid JSON");
}
