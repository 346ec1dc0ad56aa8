// Run files against their budgets, and the bytes a run needs (src/search/check.cpp).
#include "testutil.hpp"

#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/run_config.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace memest;

namespace {

RunSpec llama_7b(std::uint64_t b, std::uint64_t s) {
  RunSpec r;
  r.model = load_model_preset("llama-2-7b");
  r.precision = precision_preset("bf16");
  r.optimizer.kind = OptimizerKind::adamw;
  r.training.micro_batch = b;
  r.training.seq_len = s;
  return r;
}

}  // namespace

TEST_CASE("check: a run file's need against its own budget", "[check]") {
  const std::string path = "configs/examples/llama-2-7b-budget.json";
  const CheckResult r = check_run_file(path, RunOptions{});
  REQUIRE(r.status == CheckStatus::fits);
  CHECK(r.problems.empty());
  CHECK(r.activations_estimated);
  REQUIRE(r.budget);
  CHECK(r.budget->capacity == 80ULL << 30);  // "budget": "80GiB"
  REQUIRE(r.check);
  CHECK(r.check->need == bytes_needed(resolve(load_run_config(path))));
  CHECK(r.check->headroom == r.check->usable - r.check->need);

  // Flags laid over the file: 64 sequences of 4096 tokens do not fit in 80 GiB.
  RunOptions flags;
  flags.batch = Setting<std::string>{"64", "--batch"};
  const CheckResult over = check_run_file(path, flags);
  CHECK(over.status == CheckStatus::over);
  REQUIRE(over.check);
  CHECK(over.check->over == over.check->need - over.check->usable);
}

TEST_CASE("check: a bad run file is invalid, one problem per line", "[check]") {
  const std::string path = "tests/data/bad/several_problems.json";
  const CheckResult r = check_run_file(path, RunOptions{});
  CHECK(r.status == CheckStatus::invalid);
  std::istringstream expected(test::read_file(test::data_path("data/bad/several_problems.err")));
  std::vector<std::string> lines;
  for (std::string line; std::getline(expected, line);)
    lines.push_back(line.substr(std::string_view("memest: error: ").size()));
  CHECK(r.problems == lines);
  CHECK_FALSE(r.check);

  // A valid run without a budget has nothing to be checked against.
  const auto dir = std::filesystem::temp_directory_path() / "memest_check_test";
  std::filesystem::create_directories(dir);
  const std::string no_budget = (dir / "no_budget.json").string();
  std::ofstream(no_budget) << R"({"model": {"name": "gpt2"}})";
  const CheckResult nb = check_run_file(no_budget, RunOptions{});
  std::filesystem::remove_all(dir);
  CHECK(nb.status == CheckStatus::invalid);
  CHECK(nb.problems ==
        std::vector<std::string>{no_budget +
                                 ": /hardware: no budget: set hardware.gpu (see 'memest gpus') or "
                                 "hardware.budget"});
}

TEST_CASE("bytes_needed(run) is the estimate's need at every size", "[check]") {
  NeedCache need;
  for (const std::uint64_t b : {1ULL, 3ULL, 8ULL}) {
    const RunSpec r = llama_7b(b, 2048);
    CAPTURE(b);
    const std::uint64_t from_estimate = bytes_needed(estimate(r));
    CHECK(bytes_needed(r) == from_estimate);
    CHECK(need(r) == from_estimate);  // the plans compiled at b = 1, evaluated at b
  }
  RunSpec sgd = llama_7b(2, 2048);
  sgd.optimizer.kind = OptimizerKind::sgd;  // another step: compiled again
  CHECK(need(sgd) == bytes_needed(estimate(sgd)));
  CHECK(need(sgd) < need(llama_7b(2, 2048)));
  // Without a batch and a sequence there is no step: the sum of the categories.
  CHECK(need(llama_7b(0, 0)) == bytes_needed(estimate(llama_7b(0, 0))));
}

// sweep and fit ask a NeedCache about the sizes of one run; a split run is checked at the first
// size asked, as each command's outputs (compared by scripts/differential.py) were made.
TEST_CASE("a NeedCache checks a split run at its first sizes", "[check]") {
  RunSpec r = llama_7b(1, 1024);
  r.parallel.tensor = 2;
  r.parallel.sequence = true;  // the sequence splits over the two ranks: an even length
  NeedCache need;
  const std::uint64_t at_1024 = need(r);
  CHECK(at_1024 == bytes_needed(r));
  r.training.seq_len = 1025;
  CHECK_THROWS_AS(bytes_needed(r), Error);  // a fresh cache checks the odd length
  CHECK(need(r) > at_1024);                 // the kept plans evaluate it
}
