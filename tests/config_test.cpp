#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/run_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

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

TEST_CASE("every flag has a config key and every key a flag", "[config]") {
  std::set<std::string> flags, keys;
  for (const auto& info : run_option_table()) {
    REQUIRE((info.text == nullptr) != (info.boolean == nullptr));
    REQUIRE(flags.insert(info.flag).second);
    REQUIRE(keys.insert(info.section + "/" + info.key).second);
  }
  auto help = run_cli({"--help"});
  for (const auto& f : flags) REQUIRE_THAT(help.out, Catch::Contains(f));
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
