#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/run_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

using namespace memest;
using memest::test::read_file;
using memest::test::run_cli;

TEST_CASE("every bad run config gives exactly its expected messages, exit 2", "[config]") {
  // tests/data/bad/<case>.json + <case>.err: adding a failure case takes two files, no code.
  std::vector<std::string> cases;
  for (const auto& entry : std::filesystem::directory_iterator("tests/data/bad")) {
    if (entry.path().extension() == ".json") cases.push_back(entry.path().string());
  }
  std::sort(cases.begin(), cases.end());
  REQUIRE(cases.size() >= 8);
  for (const auto& path : cases) {
    CAPTURE(path);
    auto r = run_cli({"--file", path});
    REQUIRE(r.code == 2);
    REQUIRE(r.out.empty());
    const auto expected = read_file(path.substr(0, path.size() - 5) + ".err");
    REQUIRE(r.err == expected);
  }
}

TEST_CASE("flags override a run config", "[config]") {
  auto file = run_cli({"--file", "tests/data/runs/seed_fp32.json", "--format", "json"});
  REQUIRE(file.code == 0);
  REQUIRE_THAT(file.out, Catch::Contains("\"bytes\": 112000000000"));
  auto over = run_cli(
      {"--file", "tests/data/runs/seed_fp32.json", "--precision", "bf16", "--format", "json"});
  REQUIRE(over.code == 0);
  REQUIRE_THAT(over.out, Catch::Contains("\"bytes\": 56000000000"));
}

TEST_CASE("a run config's values are named by file and pointer", "[config]") {
  auto options = parse_run_config(
      R"({"model": {"params": 7000000000}, "training": {"micro_batch": 2, "seq_len": 128},
          "optimizer": {"name": "sgd-momentum", "nesterov": true}})",
      "t.json");
  REQUIRE(options.params->value == "7000000000");
  REQUIRE(options.batch->where == "t.json: /training/micro_batch");
  REQUIRE(options.nesterov->value);
  auto run = resolve(options);
  REQUIRE(run.training.micro_batch == 2);
  REQUIRE(run.optimizer.nesterov);
}

TEST_CASE("a file that cannot be read gets the same words from every loader", "[config]") {
  // --config reads a config.json, --file and check a run config, and a run config's
  // model.config a config.json again: one reader, so one message, naming the path.
  auto [path, problem] = GENERATE(table<std::string, std::string>({
      {"tests/data", "cannot open file: Is a directory"},
      {"tests/data/nope.json", "cannot open file: No such file or directory"},
      {"tests/data/bad/invalid_json.json",
       "invalid JSON: parse error at line 2, column 28: syntax error while parsing object key - "
       "unexpected '}'; expected string literal"},
  }));
  CAPTURE(path);
  for (const char* flag : {"--config", "--file"}) {
    CAPTURE(flag);
    const auto r = run_cli({flag, path});
    REQUIRE(r.code == 2);
    REQUIRE(r.out.empty());
    REQUIRE(r.err == fmt::format("memest: error: {}: {}\n", path, problem));
  }
  const auto check = run_cli({"check", path});
  REQUIRE(check.code == 2);
  REQUIRE(check.out == fmt::format("{}: invalid: {}\n0 fit, 0 over, 1 invalid\n", path, problem));
  // A relative model.config is taken relative to the run config, here the current directory.
  const auto options =
      parse_run_config(fmt::format(R"({{"model": {{"config": "{}"}}}})", path), "run.json");
  REQUIRE_THROWS_WITH(resolve(options),
                      fmt::format("run.json: /model/config: {}: {}", path, problem));
}

TEST_CASE("a result reproduces itself: stacks, QLoRA, FSDP, model loading and files", "[config]") {
  using memest::test::check_round_trip;
  const std::vector<std::string> llama = {"--model", "llama-2-7b", "--batch", "2", "--seq", "512"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), llama.begin(), llama.end());
    return more;
  };
  SECTION("a stack, its defaults written out") {
    check_round_trip(with({"--stack", "torchtune", "--lora-rank", "8", "--qlora", "--layer-clones",
                           "--allocator", "cuda", "--gpu", "a100-80gb"}),
                     "stack.json");
    check_round_trip(with({"--stack", "megatron", "--dp", "4", "--distributed-optimizer",
                           "--precision", "bf16", "--tp", "2", "--sp"}),
                     "megatron.json");
  }
  SECTION("LoRA, QLoRA and FSDP, with the older spellings") {
    check_round_trip(with({"--lora-rank", "16", "--lora-targets", "all-linear", "--lora-dropout",
                           "0.1", "--qlora", "--double-quant", "--qlora-init", "whole",
                           "--precision", "bf16", "--fused-optimizer", "--allocator", "cuda"}),
                     "qlora.json");
    check_round_trip(
        with({"--dp", "8", "--fsdp", "hybrid", "--fsdp-group", "4", "--fsdp-param-dtype", "bf16",
              "--fsdp-orig-params", "--fsdp-sync-module-states", "--grad-accum", "2",
              "--fsdp-no-sync", "--allocator", "cuda", "--amp"}),
        "fsdp.json");
    check_round_trip(with({"--dp", "2", "--zero", "3", "--offload", "optimizer,params",
                           "--model-loading", "full", "--budget", "20GB", "--reserve", "1GiB"}),
                     "zero.json");
  }
  SECTION("a config.json by path and inline, a run config") {
    check_round_trip({"--config", "configs/models/gpt2.json", "--batch", "1", "--seq", "64"},
                     "config.json");
    check_round_trip({"--architecture", read_file("configs/models/pythia-70m.json"), "--batch", "1",
                      "--seq", "64", "--device", "cpu"},
                     "architecture.json");
    for (const auto& entry : std::filesystem::directory_iterator("configs/examples")) {
      CAPTURE(entry.path().string());
      check_round_trip({"--file", entry.path().string()}, "example.json");
    }
  }
}

TEST_CASE("a run config holds only the keys that apply to its run", "[config]") {
  const auto j = memest::test::run_json({"--params", "7B", "--optimizer", "sgd-momentum"});
  const auto& in = j["inputs"];
  CHECK(in["optimizer"]["nesterov"] == false);           // sgd-momentum's own option
  CHECK_FALSE(in["optimizer"].contains("amsgrad"));      // adam's and adamw's
  CHECK_FALSE(in["model"].contains("lora_targets"));     // no adapters
  CHECK_FALSE(in["parallel"].contains("fsdp_version"));  // no FSDP
  CHECK_FALSE(in["precision"].contains("amp"));          // a shorter spelling of the preset
  CHECK_FALSE(in["training"].contains("micro_batch"));   // not given: no activations
  CHECK(in["model"]["loading"] == "none");
  const auto q = memest::test::run_json({"--model", "llama-2-7b", "--lora-rank", "8", "--qlora",
                                         "--qlora-init", "chunked", "--layer-clones", "--amp"});
  CHECK(q["inputs"]["model"]["loading"] == "layer-clones,nf4-chunked");
  CHECK_FALSE(q["inputs"]["model"].contains("qlora_init"));
  CHECK_FALSE(q["inputs"]["model"].contains("layer_clones"));
  CHECK(q["inputs"]["precision"]["preset"] == "amp");
  CHECK(q["inputs"]["model"]["lora_targets"] == "q,v");  // the default, written out
}
