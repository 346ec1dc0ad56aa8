// Hostile input: the corpus in tests/data/bad/hostile (MANIFEST.jsonc lists each case with its
// exit code and message), and the cases a repository cannot hold as files (a FIFO, a file past
// the size cap, a path that is not UTF-8), all through the CLI in-process.
#include "testutil.hpp"

#include <memest/hf_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using memest::test::read_file;
using memest::test::run_cli;
using memest::test::TempDir;

namespace {

const std::string kDir = "tests/data/bad/hostile";

std::ptrdiff_t count_lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }

}  // namespace

TEST_CASE("every hostile file gives its exit code and message", "[hostile]") {
  const auto manifest = nlohmann::json::parse(read_file(kDir + "/MANIFEST.jsonc"), nullptr, true,
                                              /*ignore_comments=*/true);
  REQUIRE(manifest.size() >= 15);
  std::set<std::string> used;
  for (const auto& c : manifest) {
    const auto args = c.at("args").get<std::vector<std::string>>();
    CAPTURE(fmt::format("memest {}", fmt::join(args, " ")));
    for (const auto& a : args) {
      if (a.starts_with(kDir + "/")) used.insert(a.substr(kDir.size() + 1));
    }
    const auto r = run_cli(args);
    const std::string all = r.err + r.out;
    CAPTURE(all);
    REQUIRE(r.code == c.at("exit").get<int>());
    REQUIRE_THAT(all, Catch::Contains(c.at("message").get<std::string>()));
    if (c.contains("absent"))
      REQUIRE_THAT(all, !Catch::Contains(c.at("absent").get<std::string>()));
    if (r.code == 2 && args.front() != "check") {
      REQUIRE(r.out.empty());
      REQUIRE(count_lines(r.err) == 1);
      REQUIRE_THAT(r.err, Catch::StartsWith("memest: error: "));
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string name = entry.path().filename().string();
    if (name != "MANIFEST.jsonc") {
      INFO(name << " is in the corpus but no case of MANIFEST.jsonc uses it");
      REQUIRE(used.count(name) == 1);
    }
  }
}

TEST_CASE("a FIFO is refused, never waited on", "[hostile]") {
  const TempDir dir("hostile");
  const std::string fifo = (dir.path / "config.json").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const char* flag : {"--config", "--file"}) {
    const auto r = run_cli({flag, fifo});
    REQUIRE(r.code == 2);
    REQUIRE(
        r.err ==
        fmt::format("memest: error: {}: cannot open file: not a regular file (a FIFO)\n", fifo));
  }
}

TEST_CASE("a file past the 16 MiB cap is refused unread", "[hostile]") {
  const TempDir dir("hostile");
  const std::string big = (dir.path / "big.json").string();
  {
    std::ofstream out(big, std::ios::binary);
    out << "{\"model_type\": \"llama\"}";
    out << std::string(16 * 1024 * 1024, ' ');
  }
  const auto r = run_cli({"--config", big});
  REQUIRE(r.code == 2);
  REQUIRE(r.err == fmt::format("memest: error: {}: file is larger than 16777216 bytes, the limit "
                               "for a config file\n",
                               big));
}

TEST_CASE("a path that is not UTF-8 is written into JSON output as U+FFFD", "[hostile]") {
  const TempDir dir("hostile");
  const auto folder = dir.path / "bad\xff";
  std::filesystem::create_directories(folder);
  std::filesystem::copy_file("configs/examples/gpt2-amp-t4.json", folder / "run.json");
  // The model name is taken from the folder when the file has no _name_or_path.
  auto config = nlohmann::json::parse(read_file("configs/models/gpt2.json"), nullptr, true, true);
  config.erase("_name_or_path");
  std::ofstream((folder / "config.json").string(), std::ios::binary) << config.dump();
  const auto est = run_cli({"--config", (folder / "config.json").string(), "--format", "json"});
  REQUIRE(est.code == 0);
  REQUIRE_THAT(est.out, Catch::Contains("\"bad\xef\xbf\xbd\""));
  const auto check = run_cli({"check", (folder / "run.json").string(), "--format", "json"});
  REQUIRE(check.code == 0);
  REQUIRE_THAT(check.out, Catch::Contains("bad\xef\xbf\xbd/run.json"));
}

TEST_CASE("MoE layer counts in closed form agree with the per-layer rule", "[hostile]") {
  // The loaders count MoE layers without a loop over the layers; here the loop of transformers'
  // modeling code (DeepseekV2DecoderLayer, Qwen2MoeDecoderLayer) checks the closed form.
  for (std::uint64_t layers = 1; layers <= 13; ++layers) {
    for (std::uint64_t freq = 1; freq <= 4; ++freq) {
      for (std::uint64_t first = 0; first <= 5; ++first) {
        const auto m = memest::parse_hf_config(
            fmt::format(R"({{"model_type": "deepseek_v2", "vocab_size": 64, "hidden_size": 32,
                "num_hidden_layers": {}, "num_attention_heads": 4, "intermediate_size": 64,
                "n_routed_experts": 4, "num_experts_per_tok": 2, "first_k_dense_replace": {},
                "moe_layer_freq": {}}})",
                        layers, first, freq),
            "t.json");
        std::uint64_t expected = 0;
        for (std::uint64_t i = 0; i < layers; ++i)
          expected += (i >= first && i % freq == 0) ? 1U : 0U;
        CAPTURE(layers, freq, first);
        REQUIRE(m.arch->moe_layers == expected);
      }
      const auto q = memest::parse_hf_config(
          fmt::format(R"({{"model_type": "qwen2_moe", "vocab_size": 64, "hidden_size": 32,
              "num_hidden_layers": {}, "num_attention_heads": 4, "intermediate_size": 64,
              "num_experts": 4, "num_experts_per_tok": 2, "decoder_sparse_step": {},
              "mlp_only_layers": [1, 3, 3, 20]}})",
                      layers, freq),
          "t.json");
      std::uint64_t expected = 0;
      for (std::uint64_t i = 0; i < layers; ++i)
        expected += (i != 1 && i != 3 && (i + 1) % freq == 0) ? 1U : 0U;
      CAPTURE(layers, freq);
      REQUIRE(q.arch->moe_layers == expected);
    }
  }
}

TEST_CASE(
    "differential run 1537: a state-space model split over devices has no kv heads to "
    "divide by",
    "[hostile]") {
  // Mamba has no attention, so no kv heads; the layout notes divided --tp by them (SIGFPE).
  for (const char* split : {"--pp", "--tp", "--cp"}) {
    const auto r = run_cli({"--model", "mamba-2.8b", split, "2", "--dp", "2"});
    INFO(split << ": " << r.err);
    CHECK(r.code == 0);
    CHECK(r.out.find("kv heads") == std::string::npos);
  }
}
