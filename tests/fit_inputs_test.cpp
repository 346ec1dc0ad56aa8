// Issue 23, part 1: fit answers the question asked. Every input it is given is honoured (and
// said so) or refused with one line naming the flag; nothing is assumed silently.
#include "testutil.hpp"

#include <fmt/format.h>

using memest::test::run_cli;
using memest::test::run_json;
using memest::test::run_json_answer;

namespace {

// The bytes a plain estimate of `args` needs on one device, as its JSON says.
std::uint64_t need_of(std::vector<std::string> args) {
  args.insert(args.end(), {"--gpu", "a10"});
  const auto j = run_json_answer(args);
  return j["budget"]["need_bytes"].get<std::uint64_t>();
}

}  // namespace

TEST_CASE("fit --for seq with --gpus searches the sequence of each layout", "[search][cli]") {
  // The case, on a model small enough for a debug build: --for seq was dropped and the
  // layouts' largest micro-batches were listed at a sequence never given.
  const std::vector<std::string> base = {"--model",     "llama-3.2-1b", "--batch",     "2",
                                         "--precision", "bf16",         "--attention", "flash"};
  std::vector<std::string> args = {"fit", "--for", "seq", "--gpus", "2", "--gpu", "a10"};
  args.insert(args.end(), base.begin(), base.end());
  auto table = run_cli(args);
  INFO(table.err);
  REQUIRE(table.code == 0);
  CHECK_THAT(table.out, Catch::Contains("max seq"));
  CHECK_THAT(table.out, !Catch::Contains("max batch"));
  CHECK_THAT(table.out, !Catch::Contains("sequence 2048"));
  // Without --seq the needs and headroom columns are at sequence 1, and the table says so.
  CHECK_THAT(table.out, Catch::Contains("needs and headroom at sequence 1)"));
  const auto j = run_json_answer(args);
  REQUIRE(j["target"] == "seq_len");
  REQUIRE(j["micro_batch"] == 2);
  REQUIRE(!j["layouts"].empty());
  std::uint64_t previous = ~0ULL;
  for (const auto& l : j["layouts"]) {
    const std::uint64_t seq = l["largest_seq_len"].get<std::uint64_t>();
    CHECK(seq <= previous);  // the longest sequence first
    previous = seq;
    std::vector<std::string> at = base;
    for (const auto& [flag, key] :
         std::vector<std::pair<std::string, std::string>>{{"--tp", "tensor_parallel"},
                                                          {"--pp", "pipeline_parallel"},
                                                          {"--cp", "context_parallel"},
                                                          {"--dp", "data_parallel"},
                                                          {"--zero", "zero_stage"},
                                                          {"--recompute", "recompute"},
                                                          {"--microbatches", "microbatches"}}) {
      if (key == "microbatches" && l[key] == 0) continue;
      if (key == "zero_stage" && l["data_parallel"] == 1) continue;
      at.insert(at.end(), {flag, l[key].is_string() ? l[key].get<std::string>() : l[key].dump()});
    }
    if (l["sequence_parallel"] == true) at.push_back("--sp");
    if (l["virtual_stages"] != 1) at.insert(at.end(), {"--vpp", l["virtual_stages"].dump()});
    if (l.contains("schedule") && l["schedule"].is_string())
      at.insert(at.end(), {"--pp-schedule", l["schedule"].get<std::string>()});
    CAPTURE(at, seq);
    const std::uint64_t usable = j["usable_bytes"].get<std::uint64_t>();
    std::vector<std::string> fits = at, over = at;
    fits.insert(fits.end(), {"--seq", std::to_string(seq)});
    CHECK(need_of(fits) <= usable);
    if (seq < j["limit"].get<std::uint64_t>()) {
      over.insert(over.end(), {"--seq", std::to_string(seq + 1)});
      CHECK(need_of(over) > usable);
    }
  }
}

TEST_CASE("fit refuses a missing sequence or micro-batch as a plain estimate does",
          "[search][cli]") {
  auto no_seq = run_cli({"fit", "--model", "llama-2-7b", "--gpu", "h100-80gb"});
  CHECK(no_seq.code == 2);
  CHECK(no_seq.out.empty());
  CHECK_THAT(no_seq.err, Catch::Contains("--seq"));
  CHECK(std::count(no_seq.err.begin(), no_seq.err.end(), '\n') == 1);
  auto no_batch = run_cli({"fit", "--for", "seq", "--model", "llama-2-7b", "--gpu", "h100-80gb"});
  CHECK(no_batch.code == 2);
  CHECK_THAT(no_batch.err, Catch::Contains("--batch"));
  auto layouts = run_cli({"fit", "--gpus", "8", "--model", "llama-2-7b", "--gpu", "h100-80gb"});
  CHECK(layouts.code == 2);
  CHECK_THAT(layouts.err, Catch::Contains("--seq"));
  // Given, or read from a run config, they are used as they are.
  auto given = run_cli({"fit", "--model", "llama-2-7b", "--seq", "512", "--gpu", "h100-80gb"});
  CHECK((given.code == 0 || given.code == 1));
  CHECK_THAT(given.out, Catch::Contains("at sequence length 512"));
}

TEST_CASE("fit says where the --batch or --seq it searches past stands", "[search][cli]") {
  const std::vector<std::string> run = {"--model", "llama-3.2-1b", "--precision",
                                        "bf16",    "--attention",  "flash"};
  for (const auto& [target, flag, value, other, other_value] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string, std::string>>{
           {"batch", "--batch", "3", "--seq", "512"},
           {"batch", "--batch", "4096", "--seq", "512"},
           {"seq", "--seq", "1000", "--batch", "2"}}) {
    std::vector<std::string> args = {"fit", "--for",     target,  flag, value,
                                     other, other_value, "--gpu", "a10"};
    args.insert(args.end(), run.begin(), run.end());
    auto r = run_cli(args);
    CAPTURE(args, r.out, r.err);
    REQUIRE((r.code == 0 || r.code == 1));
    std::vector<std::string> est = run;
    est.insert(est.end(), {flag, value, other, other_value});
    const std::uint64_t need = need_of(est);
    const auto usable = run_json_answer(args)["budget"]["usable_bytes"].get<std::uint64_t>();
    const std::string name = target == "batch" ? "micro-batch" : "sequence length";
    const std::string verdict = need <= usable ? "fits" : "over by";
    CHECK_THAT(r.out, Catch::Contains(fmt::format("given {} {} ({}) needs", name, value, flag)));
    CHECK_THAT(r.out, Catch::Contains(verdict));
    const auto j = run_json_answer(args);
    CHECK(j["given"]["value"] == std::stoull(value));
    CHECK(j["given"]["need_bytes"] == need);
    CHECK(j["given"]["fits"] == (need <= usable));
  }
}

TEST_CASE("fit --gpus keeps the --tp, --pp, --dp, --zero and --recompute it is given",
          "[search][cli]") {
  const std::vector<std::string> base = {"fit",     "--gpus",       "8",     "--gpu", "a10",
                                         "--model", "llama-3.2-1b", "--seq", "1024",  "--precision",
                                         "bf16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  auto tp = run_json_answer(with({"--tp", "2"}));
  REQUIRE(!tp["layouts"].empty());
  for (const auto& l : tp["layouts"]) CHECK(l["tensor_parallel"] == 2);
  auto fixed =
      run_json_answer(with({"--pp", "2", "--dp", "4", "--zero", "1", "--recompute", "full"}));
  REQUIRE(!fixed["layouts"].empty());
  for (const auto& l : fixed["layouts"]) {
    CHECK(l["pipeline_parallel"] == 2);
    CHECK(l["data_parallel"] == 4);
    CHECK(l["zero_stage"] == 1);
    CHECK(l["recompute"] == "full");
  }
  auto table = run_cli(with({"--tp", "2"}));
  CHECK_THAT(table.out, Catch::Contains("fixed      --tp 2"));
  // What cannot make 8 GPUs is refused, naming the flag.
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--dp", "3"}, {"--dp", "16"}, {"--tp", "4", "--pp", "4"}}) {
    auto r = run_cli(with(bad));
    CAPTURE(bad, r.err);
    CHECK(r.code == 2);
    CHECK_THAT(r.err, Catch::Contains(bad.front()) && Catch::Contains("8 GPUs"));
  }
}

TEST_CASE("fit with the replayed allocator finds a size that fits above one that does not",
          "[search][cli][allocator]") {
  // The case: Llama-3.2-1B, mixed bf16, SGD with momentum, eager attention, 512 tokens,
  // a 20 GB budget. Micro-batch 1 packs its 2-8 MiB tensors into shared 20 MiB segments that
  // stay split, and needs more than micro-batch 2; fit used to stop at 1 and say nothing fits.
  const std::vector<std::string> base = {"--model",     "llama-3.2-1b", "--precision", "mixed-bf16",
                                         "--optimizer", "sgd-momentum", "--attention", "eager",
                                         "--allocator", "cuda",         "--seq",       "512",
                                         "--budget",    "20GB"};
  std::vector<std::string> fit = {"fit"};
  fit.insert(fit.end(), base.begin(), base.end());
  const auto j = run_json_answer(fit);
  REQUIRE(j["best"].is_number());
  const auto best = j["best"].get<std::uint64_t>();
  REQUIRE(best > 1);
  REQUIRE(j["smaller_over"]["value"] == 1);
  CHECK(j["smaller_over"]["need_bytes"].get<std::uint64_t>() > 20'000'000'000ULL);
  CHECK_THAT(run_cli(fit).out, Catch::Contains("micro-batch 1 needs"));
  // The estimate agrees on both sides: the answer fits (exit 0), the next size and 1 do not.
  const auto at = [&](std::uint64_t b) {
    std::vector<std::string> a = base;
    a.insert(a.end(), {"--batch", std::to_string(b)});
    return run_cli(a).code;
  };
  CHECK(at(best) == 0);
  CHECK(at(best + 1) == 1);
  CHECK(at(1) == 1);
}
