// llama.cpp's buffer of each weight (src/serve/llama_cpp_tensors.cpp) and `memest serve
// --engine llama.cpp` with --device, --split-mode and --override-tensor: bytes per device worked
// out by hand from the models' shapes.
#include "serve/llama_cpp_tensors.hpp"

#include "testutil.hpp"

#include <memest/error.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

using memest::LlamaCppSettings;
using memest::LlamaTensor;
using memest::test::run_cli;
using Json = nlohmann::json;

LlamaTensor tensor(std::string name, std::optional<std::uint64_t> layer, std::uint64_t bytes) {
  LlamaTensor t;
  t.name = std::move(name);
  t.layer = layer;
  t.bytes = bytes;
  return t;
}

LlamaCppSettings two_devices() {
  LlamaCppSettings s;
  s.device_names = {"CUDA0", "CUDA1"};
  return s;
}

// llama.cpp's serve JSON document for `args`, which must be accepted.
Json serve_json(std::vector<std::string> args) {
  args.insert(args.begin(), {"serve", "--engine", "llama.cpp"});
  return memest::test::run_json(std::move(args));
}

}  // namespace

TEST_CASE("llama.cpp tensors: the first matching override wins, else the layer's device",
          "[serve]") {
  LlamaCppSettings s = two_devices();
  // Two layers and the output are three slots: il / 3 < 1/2 puts both layers on CUDA0, the
  // output (2 / 3) on CUDA1.
  const auto p = memest::place_llama_cpp_layers(2, s);
  LlamaTensor embd = tensor("token_embd.weight", std::nullopt, 1000);
  embd.input = true;
  const std::vector<LlamaTensor> t = {
      embd, tensor("blk.0.ffn_up_exps.weight", 0, 10), tensor("blk.1.ffn_up_exps.weight", 1, 20),
      tensor("blk.1.attn_q.weight", 1, 40), tensor("output.weight", std::nullopt, 80)};
  auto w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.device == std::vector<std::uint64_t>{70, 80});
  CHECK(w.host == 1000);
  CHECK(w.overridden == 0);
  // regex_search: "exps" anywhere in the name; the earlier pattern wins for blk.1.
  s.overrides = {{"blk\\.1\\.", "CUDA0"}, {"exps", "CPU"}};
  w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.device == std::vector<std::uint64_t>{60, 80});
  CHECK(w.host == 1010);
  CHECK(w.overridden == 3);
  s.overrides = {{"token_embd", "CUDA1"}};
  w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.host == 0);
  CHECK(w.device[1] == 1080);
}

TEST_CASE("llama.cpp tensors: a tied output copies token_embd only into another buffer",
          "[serve]") {
  LlamaCppSettings s = two_devices();
  LlamaTensor embd = tensor("token_embd.weight", std::nullopt, 1000);
  embd.input = true;
  LlamaTensor copy = embd;
  copy.input = false;
  copy.tied_copy = true;
  const std::vector<LlamaTensor> t = {embd, copy};
  auto p = memest::place_llama_cpp_layers(2, s);
  auto w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.host == 1000);
  CHECK(w.device == std::vector<std::uint64_t>{0, 1000});
  // The output on the CPU (-ngl 2 of 2 layers): the same buffer, one copy.
  s.n_gpu_layers = 2;
  p = memest::place_llama_cpp_layers(2, s);
  w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.host == 1000);
  CHECK(w.device == std::vector<std::uint64_t>{0, 0});
  // Both moved to CUDA1 by one pattern: again one buffer.
  s.n_gpu_layers = 999;
  s.overrides = {{"token_embd", "CUDA1"}};
  p = memest::place_llama_cpp_layers(2, s);
  w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.device == std::vector<std::uint64_t>{0, 1000});
}

TEST_CASE("llama.cpp tensors: row split takes the matrices, not the norms", "[serve]") {
  LlamaCppSettings s = two_devices();
  s.split_mode = "row";
  const auto p = memest::place_llama_cpp_layers(1, s);
  LlamaTensor q = tensor("blk.0.attn_q.weight", 0, 4096 * 8192);  // 4096 rows of 8192 bytes
  q.matrix = true;
  q.rows = 4096;
  q.ne0 = 4096;
  const std::vector<LlamaTensor> t = {q, tensor("blk.0.attn_norm.weight", 0, 16384)};
  const auto w = memest::place_llama_cpp_weights(t, p, s);
  CHECK(w.device == std::vector<std::uint64_t>{2048 * 8192 + 16384, 2048 * 8192});
}

TEST_CASE("llama.cpp tensors: bad --override-tensor refused", "[serve]") {
  LlamaCppSettings s = two_devices();
  const auto p = memest::place_llama_cpp_layers(2, s);
  s.overrides = {{"(", "CPU"}};
  CHECK_THROWS_AS(memest::place_llama_cpp_weights({}, p, s), memest::Error);
  s.overrides = {{"exps", "CUDA2"}};
  CHECK_THROWS_WITH(memest::place_llama_cpp_weights({}, p, s),
                    "--override-tensor: unknown buffer type \"CUDA2\" (expected CPU or a device: "
                    "CUDA0, CUDA1)");
}

TEST_CASE("llama.cpp tensors: Llama-3.1-8B F16 over two GPUs, bytes from shapes", "[serve]") {
  // 32 layers and the output make 33 slots; CUDA0 takes layers 0-16 (il / 33 < 1/2), CUDA1
  // layers 17-31 and the output. A layer in F16: q and o 4096 x 4096, k and v 1024 x 4096,
  // gate, up and down 14336 x 4096, two f32 norms of 4096.
  const std::uint64_t layer =
      2 * (2 * 4096ULL * 4096 + 2 * 1024ULL * 4096 + 3 * 14336ULL * 4096) + 2 * 4 * 4096;
  const std::uint64_t output = 2 * 128256ULL * 4096 + 4 * 4096;  // output + output_norm
  const std::uint64_t kv_layer = 2 * 2 * 1024ULL * 4096;         // K and V, 1024 wide, 4096 cells
  const Json j = serve_json({"--model", "llama-3.1-8b", "--ctx-size", "4096", "--quantization",
                             "F16", "--device", "CUDA0,CUDA1"});
  REQUIRE(j["per_device"].size() == 2);
  CHECK(j["per_device"][0]["layers"] == 17);
  CHECK(j["per_device"][0]["weights"]["bytes"] == 17 * layer);
  CHECK(j["per_device"][0]["kv_cache"]["bytes"] == 17 * kv_layer);
  CHECK(j["per_device"][1]["output"] == true);
  CHECK(j["per_device"][1]["weights"]["bytes"] == 15 * layer + output);
  CHECK(j["per_device"][1]["kv_cache"]["bytes"] == 15 * kv_layer);
  CHECK(j["host"]["weights"]["bytes"] == 2 * 128256ULL * 4096);  // token_embd
  // The top-level figures are the fuller device's: CUDA1 with the output.
  CHECK(j["weights"]["bytes"] == 15 * layer + output);
  // Row split: every matrix halved by rows (4096 / 2, 1024 / 2, 14336 / 2 and 128256 / 2 are
  // multiples of 128), the norms on the layer's device, the KV cache with the layer.
  const Json r = serve_json({"--model", "llama-3.1-8b", "--ctx-size", "4096", "--quantization",
                             "F16", "--device", "CUDA0,CUDA1", "--split-mode", "row"});
  const std::uint64_t matrices = layer - 2 * 4 * 4096;
  CHECK(r["per_device"][0]["weights"]["bytes"] ==
        32 * matrices / 2 + 17 * 2 * 4 * 4096 + 2 * 128256ULL * 4096 / 2);
  CHECK(r["per_device"][1]["weights"]["bytes"] ==
        32 * matrices / 2 + 15 * 2 * 4 * 4096 + 2 * 128256ULL * 4096 / 2 + 4 * 4096);
  CHECK(r["per_device"][1]["kv_cache"]["bytes"] == 15 * kv_layer);
}

TEST_CASE("llama.cpp tensors: --override-tensor exps=CPU puts the experts in host memory",
          "[serve]") {
  // Qwen3-30B-A3B in Q8_0: 48 layers x 128 experts x 3 matrices of 768 x 2048, 34 bytes per 32.
  const std::uint64_t experts = 48ULL * 128 * 3 * (768ULL * 2048 / 32 * 34);
  const std::vector<std::string> base = {"--model", "qwen3-30b-a3b",  "--ctx-size",
                                         "4096",    "--quantization", "Q8_0"};
  auto with = base;
  with.insert(with.end(), {"--override-tensor", "exps=CPU"});
  auto without = base;
  without.insert(without.end(), {"--device", "CUDA0"});
  const Json a = serve_json(with);
  const Json b = serve_json(without);
  CHECK(a["host"]["weights"]["bytes"].get<std::uint64_t>() -
            b["host"]["weights"]["bytes"].get<std::uint64_t>() ==
        experts);
  CHECK(b["weights"]["bytes"].get<std::uint64_t>() - a["weights"]["bytes"].get<std::uint64_t>() ==
        experts);
  CHECK(a["notes"][0] ==
        fmt::format("{} of weights in host memory (token_embd, 144 tensors by --override-tensor)",
                    memest::format_bytes(a["host"]["weights"]["bytes"].get<std::uint64_t>(),
                                         memest::Unit::MiB)));
}

TEST_CASE("llama.cpp tensors: bad multi-GPU flags are one line and exit 2", "[serve]") {
  const std::vector<std::vector<std::string>> bad = {
      {"--split-mode", "rows"},
      {"--tensor-split", "1,x"},
      {"--tensor-split", "1,,2"},
      {"--main-gpu", "-1"},
      {"--main-gpu", "3"},
      {"--override-tensor", "exps"},
      {"--override-tensor", "(=CPU"},
      {"--override-tensor", "exps=GPU0"},
      {"--device", "CUDA0,CUDA0"},
      {"--device", "gpu0"},
      {"--tensor-split", "1,1,1"},
      {"--device", "CUDA0,CUDA1", "--tensor-split", "0,-2"},
      // Patterns std::regex's backtracking would take exponential or long polynomial time on.
      {"--override-tensor", "(.*)*z=CPU"},
      {"--override-tensor", "([0-9]+)+=CPU"},
      {"--override-tensor", ".*.*.*z=CPU"},
  };
  for (const auto& extra : bad) {
    std::vector<std::string> args = {"serve",        "--engine",   "llama.cpp", "--model",
                                     "llama-3.1-8b", "--ctx-size", "4096"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = run_cli(args);
    INFO(extra[0] << " " << extra[1]);
    CHECK(r.code == 2);
    CHECK(r.err.find('\n') == r.err.size() - 1);
  }
  const auto v = run_cli({"serve", "--model", "llama-3.1-8b", "--tensor-split", "1,1"});
  CHECK(v.code == 2);
  CHECK(v.err.find("a llama.cpp flag") != std::string::npos);
}

TEST_CASE("llama.cpp tensors: the logs' --override-tensor patterns are taken", "[serve]") {
  // Qwen3-235B's command line (ik_llama.cpp#629): the MLP tensors of layers 0-19 on CUDA0, of
  // 20-33 on CUDA1, every other layer's in host memory; the attention stays with its layer.
  const Json j =
      serve_json({"--config", memest::test::data_path("data/inference/qwen3-235b-a22b.json"),
                  "--ctx-size", "4096", "--quantization", "Q8_0", "--device", "CUDA0,CUDA1",
                  "--tensor-split", "32,24", "--override-tensor",
                  "blk\\.([0-9]|1[0-9])\\.ffn_.*=CUDA0,blk\\.(2[0-9]|3[0-3])\\.ffn_.*=CUDA1,"
                  "blk\\.[0-9]+\\.ffn.*=CPU"});
  // In host memory: token_embd (151,936 x 4,096 in q8_0, 34 bytes per 32) and 60 layers' MLP
  // tensors: 128 x 3 expert matrices of 1536 x 4096 in q8_0, the f32 router (128 x 4096) and
  // ffn_norm (4096).
  const std::uint64_t experts = 128ULL * 3 * (1536ULL * 4096 / 32 * 34);
  const std::uint64_t mlp = experts + 128 * 4096 * 4 + 4096 * 4;
  const auto bytes = [](const Json& v) { return v.get<std::uint64_t>(); };
  CHECK(bytes(j["host"]["weights"]["bytes"]) == 151936ULL * 4096 / 32 * 34 + 60 * mlp);
  CHECK(bytes(j["per_device"][0]["weights"]["bytes"]) > 20 * mlp);
  CHECK(bytes(j["per_device"][1]["weights"]["bytes"]) > 14 * mlp);
  // Nothing lost or counted twice: the same total as without the overrides.
  const Json plain = serve_json(
      {"--config", memest::test::data_path("data/inference/qwen3-235b-a22b.json"), "--ctx-size",
       "4096", "--quantization", "Q8_0", "--device", "CUDA0,CUDA1", "--tensor-split", "32,24"});
  const auto total = [&](const Json& x) {
    return bytes(x["host"]["weights"]["bytes"]) + bytes(x["per_device"][0]["weights"]["bytes"]) +
           bytes(x["per_device"][1]["weights"]["bytes"]);
  };
  CHECK(total(j) == total(plain));
}

TEST_CASE("llama.cpp tensors: --fit with several devices tests the fullest one", "[serve]") {
  // Qwen3-30B-A3B in Q4_K_M (17.1 GiB of weights) does not fit one T4 (15 GiB) at any context;
  // split over two, each holds about half, and the model's whole 40,960 positions fit.
  const std::vector<std::string> fit = {
      "serve",         "--engine",       "llama.cpp", "--model",
      "qwen3-30b-a3b", "--quantization", "Q4_K_M",    "--fit",
      "context",       "--gpu",          "t4",        "--cache-type-k",
      "f16",           "--cache-type-v", "f16",       "--format",
      "json"};
  const auto one = run_cli(fit);
  CHECK(one.code == 1);
  CHECK(Json::parse(one.out)["rows"][0]["best"].is_null());
  auto args = fit;
  args.insert(args.end(), {"--device", "CUDA0,CUDA1"});
  const auto two = run_cli(args);
  REQUIRE(two.code == 0);
  const Json j = Json::parse(two.out);
  CHECK(j["devices"] == 2);
  CHECK(j["rows"][0]["best"] == 40960);
  const Json at = j["rows"][0]["at_best"];
  CHECK(at["need_bytes"].get<std::uint64_t>() ==
        at["weights"]["bytes"].get<std::uint64_t>() + at["kv_cache"]["bytes"].get<std::uint64_t>() +
            at["compute_buffer"]["bytes"].get<std::uint64_t>());
}
