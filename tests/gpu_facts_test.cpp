// The 36 published GPU runs typed as a new user would (tests/data/gpu/runs_facts.jsonl): only
// what each run's source states, plus --stack and --versions, none of the mechanism flags. Each
// must give the bytes its run with the mechanism flags gives (tests/data/gpu/runs.jsonl, held to
// the measurement by gpu_cases_test.cpp), so the profiles carry that knowledge.
#include "gpu_cases.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

namespace {

// The flags issue 21 names as knowledge a user cannot be expected to have.
const std::vector<std::string> kMechanismFlags = {"--softmax-keeps-input",
                                                  "--zero-grad",
                                                  "--optimizer-impl",
                                                  "--layer-clones",
                                                  "--qlora-init",
                                                  "--loop-keeps-output",
                                                  "--fsdp-sync-module-states",
                                                  "--fsdp-orig-params",
                                                  "--fsdp-no-sync",
                                                  "--qlora-keeps-input",
                                                  "--model-code",
                                                  "--load-full",
                                                  "--fsdp-param-dtype",
                                                  "--fsdp-reduce-dtype",
                                                  "--model-loading"};

}  // namespace

TEST_CASE("the GPU runs typed with facts, --stack and --versions give the flagged runs' bytes",
          "[gpu][versions]") {
  const std::string root = MEMEST_SOURCE_DIR;
  const auto flagged = memest::gpu::load_runs(root);
  const auto facts = memest::gpu::load_runs(root, "runs_facts.jsonl");
  REQUIRE(facts.size() == flagged.size());
  for (std::size_t i = 0; i < facts.size(); ++i) {
    const auto& f = facts[i];
    INFO(f.id);
    REQUIRE(f.id == flagged[i].id);
    for (const auto& flag : kMechanismFlags)
      CHECK(std::find(f.args.begin(), f.args.end(), flag) == f.args.end());
    const auto loss = std::find(f.args.begin(), f.args.end(), "--loss");
    CHECK((loss == f.args.end() || *(loss + 1) != "hf-upcast"));
    CHECK(std::find(f.args.begin(), f.args.end(), "--stack") != f.args.end());
    const auto with_facts = memest::gpu::estimated(f, memest::gpu::estimate(f));
    const auto with_flags = memest::gpu::estimated(flagged[i], memest::gpu::estimate(flagged[i]));
    CHECK(with_facts == with_flags);
  }
}
