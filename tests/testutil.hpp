#pragma once

#include "cli/cli.hpp"

#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>
#include <memest/model.hpp>
#include <memest/peak.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace memest::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A small Llama's config.json (vocab 1024, hidden 256, 2 layers, 4 heads of 64, 2 kv heads,
// 4096 positions, bf16) with `extra` keys appended: the serve tests' smallest model.
inline std::string small_llama_config(const std::string& extra) {
  return R"({"model_type": "llama", "vocab_size": 1024, "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 4096, "torch_dtype": "bfloat16")" +
         extra + "}";
}

inline std::string data_path(const std::string& rel) {
  return std::string(MEMEST_TEST_DATA) + "/" + rel;
}

/// A trainable-or-frozen group of `count` rows x cols tensors, for hand-built inventories.
inline TensorGroup group(std::string name, Role role, std::uint64_t rows, std::uint64_t cols,
                         std::uint64_t count, bool matmul, bool trainable) {
  return make_group(std::move(name), role, rows, cols, count,
                    {.matmul = matmul, .trainable = trainable});
}

/// A preset model trained with AdamW at micro-batch b and sequence s, eager attention (the
/// graphs the reference measurements ran; flash and sdpa are tested apart).
inline RunSpec run_of(std::string_view preset, std::string_view policy, std::uint64_t b,
                      std::uint64_t s) {
  RunSpec r;
  r.model = load_model_preset(preset);
  r.precision = precision_preset(policy);
  r.optimizer.kind = OptimizerKind::adamw;
  r.training.micro_batch = b;
  r.training.seq_len = s;
  r.training.attention = Attention::eager;
  return r;
}

/// A two-layer Llama small enough to size by hand: h = 64, 4 heads of d = 16, a gated SiLU MLP
/// of 128, vocabulary 100, untied; trained with SGD at micro-batch b and sequence s, eager
/// attention.
inline RunSpec tiny_llama(std::string_view policy, std::uint64_t b, std::uint64_t s) {
  RunSpec r;
  r.model = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
      "intermediate_size": 128, "vocab_size": 100})",
                            "tiny.json");
  r.precision = precision_preset(policy);
  r.optimizer.kind = OptimizerKind::sgd;
  r.training.micro_batch = b;
  r.training.seq_len = s;
  r.training.attention = Attention::eager;
  return r;
}

/// The Llama of the CPU truth cases (tests/data/truth/cases.jsonl): vocabulary 1000, hidden
/// 128, MLP 344, 2 layers, 4 heads: 651,904 parameters in 21 tensors.
inline Architecture small_llama_architecture() {
  Architecture a;
  a.model_type = "llama";
  a.vocab_size = 1000;
  a.hidden_size = 128;
  a.num_layers = 2;
  a.num_heads = 4;
  a.intermediate_size = 344;
  a.gated_mlp = true;
  a.rms_norm = true;
  return a;
}

/// Result of running the CLI in-process.
struct CliResult {
  int code;
  std::string out;
  std::string err;
};

inline CliResult run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "memest");
  std::ostringstream out, err;
  const int code = memest::cli::run(args, out, err);
  return {code, out.str(), err.str()};
}

/// The CLI's JSON document (`--format json` is added) for `args`, which must be accepted.
inline nlohmann::json run_json(std::vector<std::string> args) {
  args.insert(args.end(), {"--format", "json"});
  const CliResult r = run_cli(args);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

/// The CLI's JSON document for `args` (`--format json` is added), which must be answered: exit
/// 0, or 1 for a run over its budget.
inline nlohmann::json run_json_answer(std::vector<std::string> args) {
  args.insert(args.end(), {"--format", "json"});
  const CliResult r = run_cli(args);
  INFO(r.err);
  REQUIRE((r.code == 0 || r.code == 1));
  return nlohmann::json::parse(r.out);
}

/// A result reproduces itself: the run config the JSON document of `args` echoes as `inputs`,
/// given back with --file, gives the same document (its `inputs` the same again) and exit code
/// (0, or 1 over a budget); only the model's source may differ, as a path is written absolute.
/// `name` names the temporary file.
inline void check_round_trip(std::vector<std::string> args, const std::string& name) {
  args.insert(args.end(), {"--format", "json"});
  const CliResult a = run_cli(args);
  INFO(a.err);
  REQUIRE((a.code == 0 || a.code == 1));
  nlohmann::json first = nlohmann::json::parse(a.out);
  const auto path = std::filesystem::temp_directory_path() / ("memest-round-trip-" + name);
  std::ofstream(path, std::ios::binary) << first["inputs"].dump(2);
  const CliResult b = run_cli({"--file", path.string(), "--format", "json"});
  std::filesystem::remove(path);
  INFO("inputs: " << first["inputs"].dump() << "\n" << b.err);
  REQUIRE(b.code == a.code);
  nlohmann::json second = nlohmann::json::parse(b.out);
  CHECK(second["inputs"] == first["inputs"]);
  CHECK(second["categories"] == first["categories"]);
  CHECK(second["peak"] == first["peak"]);
  for (auto* doc : {&first, &second}) {
    doc->erase("inputs");
    (*doc)["run"]["model"].erase("source");
  }
  CHECK(second == first);
}

/// Compares `actual` with tests/golden/<name>; MEMEST_UPDATE_GOLDEN=1 rewrites the file.
inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = data_path("golden/" + name);
  if (const char* u = std::getenv("MEMEST_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  INFO("golden file " << path << " (MEMEST_UPDATE_GOLDEN=1 rewrites it)");
  REQUIRE(actual == read_file(path));
}

/// Requires the file at `path` (a doc with a table the build writes) to be `fresh`;
/// MEMEST_UPDATE_GOLDEN=1 writes it instead.
inline void expect_fresh_doc(const std::string& path, const std::string& fresh) {
  if (const char* u = std::getenv("MEMEST_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << fresh;
    return;
  }
  INFO(path << " is stale: run memest_accuracy_report or MEMEST_UPDATE_GOLDEN=1");
  REQUIRE(read_file(path) == fresh);
}

/// 2^20 bytes.
inline constexpr std::uint64_t MiB = 1ULL << 20;

/// The repository's root, for tests that read its docs and data.
inline const std::string kRoot = MEMEST_SOURCE_DIR;

/// A fresh folder under the system's temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("memest-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// The moment of a peak's walk named `name` (throws when the walk has none).
inline const Moment& moment(const Peak& p, std::string_view name) {
  for (const auto& m : p.moments) {
    if (m.name == name) return m;
  }
  throw std::out_of_range(std::string(name));
}

}  // namespace memest::test
