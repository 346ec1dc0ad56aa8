// memest against the training steps measured on an H200 (tests/data/truth_cuda, SOURCES.md
// there): exact model states, activations within 3%, the allocated peak within 5% and its phase,
// for every step whose mechanism memest models; docs/accuracy.md's table kept current.
#include "testutil.hpp"
#include "truth_cuda_cases.hpp"

#include <cstdlib>
#include <fstream>

using memest::test::read_file;
namespace tc = memest::truth_cuda;

TEST_CASE("every H200 step: exact model states, activations within 3%, peak within 5%",
          "[truth][cuda]") {
  const auto rows = tc::rows(MEMEST_SOURCE_DIR);
  REQUIRE(rows.size() == 83);
  std::size_t held = 0;
  for (const auto& r : rows) {
    INFO("step " << r.id);
    if (!r.why.empty()) continue;
    ++held;
    CHECK(r.exact);
    CHECK(std::abs(memest::truth::error_pct(r.act, r.act_measured)) <= 3.0);
    CHECK(std::abs(memest::truth::error_pct(r.peak, r.peak_measured)) <= 5.0);
    CHECK(r.phase == r.phase_measured);
  }
  CHECK(held == rows.size() - tc::kUnmodelled.size());  // each listed step is one that ran
}

TEST_CASE("the README's H200 sentence is the current build's", "[truth][cuda]") {
  const auto s = tc::summarise(tc::rows(MEMEST_SOURCE_DIR));
  std::string readme = read_file(std::string(MEMEST_SOURCE_DIR) + "/README.md");
  for (auto& c : readme)
    if (c == '\n') c = ' ';
  for (const std::string& want :
       {fmt::format("the model states are exact in {} of the {} steps", s.exact, s.held),
        fmt::format("a median error of {:.2f}% (worst {:.2f}%)", s.act_median, s.act_worst),
        fmt::format("one of {:.2f}% (worst {:.2f}%)", s.peak_median, s.peak_worst),
        fmt::format("one of {:.1f}% (worst {:.1f}%)", s.reserved_median, s.reserved_worst),
        fmt::format("On {} training steps measured on an H200", s.steps)}) {
    INFO("README.md should say: " << want);
    CHECK(readme.find(want) != std::string::npos);
  }
}

TEST_CASE("the attention asked for decides the attention flag", "[truth][cuda]") {
  const auto with = [](const char* attention) {
    return nlohmann::json::parse(
        fmt::format(R"({{"training": {{"attention": "{}"}}}})", attention));
  };
  CHECK(tc::attention_flag(with("sdpa")) == "sdpa");
  CHECK(tc::attention_flag(with("eager")) == "eager");
  CHECK(tc::attention_flag(with("sdpa-cudnn")) == "flash");
  CHECK(tc::attention_flag(with("sdpa-flash")) == "flash");
  CHECK(tc::attention_flag(with("sdpa-math")) == "eager");
  CHECK(tc::attention_flag(with("sdpa-efficient")) == "sdpa");
}

// The kernel PyTorch picked for `sdpa` (the autograd node the instrument recorded) is the one
// memest's --sdpa-enable-gqa rule picks: flash or cuDNN in 16 bits, else the math backend for
// grouped heads; the estimate with `sdpa` equals the one with the kernel named.
TEST_CASE("sdpa under transformers 5.17 keeps what the kernel that ran keeps", "[truth][cuda]") {
  std::size_t checked = 0;
  for (const auto& c :
       tc::ok_cases(std::string(MEMEST_SOURCE_DIR) + "/tests/data/truth_cuda/cases_cuda.jsonl")) {
    if (c["training"]["attention"] != "sdpa") continue;
    INFO("step " << c["id"].get<std::string>());
    std::string nodes;
    for (const auto& [name, count] : c["cuda"]["sdpa_graph_nodes"].items()) nodes += name;
    const bool fused =
        nodes.find("Cudnn") != std::string::npos || nodes.find("Flash") != std::string::npos;
    CHECK((fused || nodes.find("SafeSoftmax") != std::string::npos));
    auto named = c;
    named["training"]["attention"] = fused ? "sdpa-flash" : "sdpa-math";
    CHECK(tc::run_case(c)["activations"] == tc::run_case(named)["activations"]);
    ++checked;
  }
  CHECK(checked >= 50);
}

TEST_CASE("docs/accuracy.md lists the H200 steps as the current build estimates them",
          "[truth][cuda]") {
  const std::string path = std::string(MEMEST_SOURCE_DIR) + "/docs/accuracy.md";
  const std::string doc = read_file(path);
  const std::string fresh =
      memest::truth::with_table(doc, tc::cuda_table(MEMEST_SOURCE_DIR), tc::kBegin, tc::kEnd);
  memest::test::expect_fresh_doc(path, fresh);
}
