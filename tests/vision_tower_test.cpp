// A multimodal checkpoint's vision tower (src/model/model.cpp): its parameter count
// against published counts, and what a text-only step does with it.
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>
#include <memest/model.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>

using namespace memest;

namespace {

std::uint64_t vision_params(const Inventory& inv) {
  std::uint64_t n = 0;
  for (const auto& g : inv.groups) {
    if (g.role == Role::vision) n += g.elements();
  }
  return n;
}

nlohmann::json model_file(const std::string& name) {
  return nlohmann::json::parse(test::read_file(test::data_path("data/models/" + name + ".json")));
}

}  // namespace

// keras-hub's gemma3_presets.py (keras-team/keras-hub @ 00d9f10a8e74) publishes each Gemma 3
// size as vision+text and as text-only: gemma3_instruct_4b 4,299,915,632 and
// gemma3_instruct_4b_text 3,880,099,328, and so on. The difference is the SigLIP tower with the
// projector into that size's text width.
TEST_CASE("the vision tower and projector are the published vision+text minus text-only counts",
          "[vision_tower]") {
  auto [name, published] = GENERATE(table<std::string, std::uint64_t>({
      {"gemma-3-4b-it", 4299915632ULL - 3880099328ULL},
      {"gemma-3-12b-it", 12187079280ULL - 11765788416ULL},
      {"gemma-3-27b-it", 27432062576ULL - 27009002240ULL},
  }));
  INFO(name);
  const ModelSpec m = load_model_preset(name);
  CHECK(vision_params(m.inventory) == published);
}

// The same language model without the tower (its text_config as a gemma3_text config): a
// text-only step of the multimodal checkpoint holds the tower's weights and nothing else of it.
TEST_CASE("a text-only step holds the tower's weights and no gradient or state of it",
          "[vision_tower]") {
  const nlohmann::json whole = model_file("gemma-3-4b-it");
  nlohmann::json text = whole.at("text_config");
  text["vocab_size"] = 262208;  // Gemma3TextConfig's defaults, which the 4B file leaves out
  text["num_attention_heads"] = 8;
  text["num_key_value_heads"] = 4;
  text["head_dim"] = 256;
  RunSpec run;
  run.model = parse_hf_config(whole.dump(), "gemma-3-4b-it");
  run.training.micro_batch = 1;
  run.training.seq_len = 512;
  run.precision = precision_preset("bf16");
  RunSpec text_only = run;
  text_only.model = parse_hf_config(text.dump(), "text_config");
  const Estimate with_tower = estimate(run);
  const Estimate without = estimate(text_only);
  const std::uint64_t tower = vision_params(run.model.inventory);
  REQUIRE(tower > 0);
  CHECK(*with_tower.at("params").bytes == *without.at("params").bytes + 2 * tower);
  CHECK(with_tower.at("grads").bytes == without.at("grads").bytes);
  CHECK(with_tower.at("optimizer_states").bytes == without.at("optimizer_states").bytes);
  CHECK(with_tower.at("activations").bytes == without.at("activations").bytes);
  REQUIRE(with_tower.peak);
  REQUIRE(without.peak);
  CHECK(with_tower.peak->bytes == without.peak->bytes + 2 * tower);
  CHECK(with_tower.trainable == without.trainable);
}

TEST_CASE("a multimodal config's bad sub-config is named by its key path", "[vision_tower]") {
  nlohmann::json c = model_file("gemma-3-4b-it");
  c["vision_config"]["patch_size"] = 1000;
  CHECK_THROWS_WITH(parse_hf_config(c.dump(), "g.json"),
                    "g.json: /vision_config/patch_size: is larger than image_size");
  c = model_file("gemma-3-4b-it");
  c["text_config"] = 3;
  CHECK_THROWS_WITH(
      parse_hf_config(c.dump(), "g.json"),
      Catch::Matchers::Contains("/text_config") && Catch::Matchers::Contains("expected an object"));
}
