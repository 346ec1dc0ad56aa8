// Issue 23, part 2: what GPUs compute (gpu_support), and remedies and estimates that respect it.
#include "testutil.hpp"

#include <memest/check.hpp>
#include <memest/gpu_support.hpp>
#include <memest/search.hpp>

#include <fmt/format.h>

#include <algorithm>

using memest::test::run_cli;
using memest::test::run_json;
using memest::test::run_json_answer;
using namespace memest;

namespace {

Budget gpu_budget(std::string_view name) {
  const Gpu& gpu = find_gpu(name);
  return Budget{gpu.capacity, kDefaultReserve, std::string(name), true};
}

std::size_t lines_starting(const std::string& text, std::string_view prefix) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.starts_with(prefix);
  return n;
}

}  // namespace

TEST_CASE("GPU presets say what they compute: bf16, fp8, FlashAttention", "[hardware]") {
  CHECK_FALSE(gpu_support(find_gpu("t4")).bf16);
  CHECK_FALSE(gpu_support(find_gpu("v100-16gb")).flash_attention);
  CHECK(gpu_support(find_gpu("a100-80gb")).bf16);
  CHECK_FALSE(gpu_support(find_gpu("a100-80gb")).fp8);
  CHECK(gpu_support(find_gpu("h100-80gb")).fp8);
  CHECK(gpu_support(find_gpu("mi300x")).fp8);
  CHECK_FALSE(gpu_support(find_gpu("mi250x")).fp8);
  for (const Gpu& g : gpu_presets()) {
    CAPTURE(g.name);
    const GpuSupport s = gpu_support(g);
    CHECK((!s.fp8 || s.bf16));  // every chip with fp8 has bf16
    if (g.sm > 0) CHECK(s.flash_attention == (g.sm >= kFlashAttentionMinSm));
  }
}

TEST_CASE("remedies on a T4 never propose bf16, and the table keeps to a screen", "[search][cli]") {
  // The case: 22 remedies, bf16 policies among them, on a GPU without bf16.
  const std::vector<std::string> args = {"fit",   "--model", "gemma-2-2b", "--amp",
                                         "--seq", "1024",    "--gpu",      "t4"};
  auto r = run_cli(args);
  INFO(r.out << r.err);
  REQUIRE(r.code == 1);
  CHECK_THAT(r.out, !Catch::Contains("bf16"));
  CHECK(lines_starting(r.out, "  fits") + lines_starting(r.out, "  over") <= kRemediesShown);
  const auto j = run_json_answer(args);
  REQUIRE(!j["remedies"].empty());
  for (const auto& rem : j["remedies"])
    CHECK_THAT(rem["change"].get<std::string>(), !Catch::Contains("bf16"));
  if (j["remedies"].size() > kRemediesShown)
    CHECK_THAT(r.out, Catch::Contains("more (--format json"));
}

TEST_CASE("a run the GPU cannot run gets the fix in every remedy", "[search]") {
  RunSpec run = memest::test::run_of("llama-3.2-1b", "mixed-bf16", 4, 2048);
  run.training.attention = Attention::flash;
  const Budget budget = gpu_budget("v100-16gb");
  const auto lacks = unsupported_features(run, budget);
  REQUIRE(lacks.size() == 2);  // bf16 and FlashAttention
  const auto fixes = remedies(run, budget);
  REQUIRE(!fixes.empty());
  for (const Remedy& f : fixes) {
    CAPTURE(f.change);
    CHECK(unsupported_features(f.run, budget).empty());
    CHECK(f.need == bytes_needed(f.run));
    CHECK_THAT(f.change, Catch::Contains("fp16 for bf16") && Catch::Contains("--attention sdpa"));
  }
  // On an A100 the same run needs nothing of the kind.
  CHECK(unsupported_features(run, gpu_budget("a100-80gb")).empty());
}

TEST_CASE("a plain estimate warns when the GPU lacks what the run asks", "[cli]") {
  const std::vector<std::string> base = {"--model", "llama-3.2-1b", "--batch", "1", "--seq", "256"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto t4 = run_cli(with({"--precision", "bf16", "--gpu", "t4"}));
  CHECK_THAT(t4.out, Catch::Contains("warning: t4 has no bf16"));
  auto v100 = run_cli(with({"--attention", "flash", "--gpu", "v100-16gb"}));
  CHECK_THAT(v100.out, Catch::Contains("warning: v100-16gb cannot run FlashAttention 2"));
  const auto j = run_json_answer(with({"--precision", "bf16", "--gpu", "t4"}));
  CHECK(j["warnings"].size() == 1);
  for (const auto& fine :
       {with({"--precision", "bf16", "--gpu", "a100-80gb"}),
        with({"--precision", "bf16", "--budget", "16GB"}), with({"--amp", "--gpu", "t4"})}) {
    CHECK_THAT(run_cli(fine).out, !Catch::Contains("warning:"));
  }
}

TEST_CASE("fit warns, in its table and its JSON, when the GPU lacks what the run asks",
          "[cli][search]") {
  const std::vector<std::string> t4 = {"fit",         "--model", "llama-3.2-1b", "--seq", "256",
                                       "--precision", "bf16",    "--gpu",        "t4"};
  CHECK_THAT(run_cli(t4).out, Catch::Contains("warning: t4 has no bf16"));
  const auto j = run_json_answer(t4);
  REQUIRE(j["warnings"].size() == 1);
  CHECK_THAT(j["warnings"][0].get<std::string>(), Catch::Contains("t4 has no bf16"));
  std::vector<std::string> a100 = t4;
  a100[8] = "a100-80gb";
  CHECK(run_json_answer(a100)["warnings"].empty());
}

TEST_CASE("remedies try one card before more GPUs: QLoRA of a LoRA run", "[search][cli]") {
  // The case: LoRA of Qwen2.5-7B at 8192 tokens on a 24 GB card was told 4 to 8 GPUs
  // first, while QLoRA with full recompute fits the one card.
  const auto j = run_json_answer({"fit", "--model", "qwen2.5-7b", "--lora-rank", "16",
                                  "--precision", "bf16", "--seq", "8192", "--gpu", "rtx-4090"});
  REQUIRE(j["best"].is_null());
  const auto& rem = j["remedies"];
  REQUIRE(!rem.empty());
  CHECK(rem[0]["fits"] == true);
  CHECK(rem[0]["more_gpus"] == false);
  bool qlora = false;
  for (const auto& r : rem) {
    qlora = qlora || (r["fits"] == true &&
                      r["change"].get<std::string>().find("QLoRA") != std::string::npos);
  }
  CHECK(qlora);
}
