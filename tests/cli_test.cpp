#include "testutil.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using memest::test::expect_golden;
using memest::test::run_cli;

TEST_CASE("golden output of the seed's examples", "[cli]") {
  auto [name, args] = GENERATE(table<std::string, std::vector<std::string>>({
      {"seed_fp32.txt", {"--params", "7B", "--optimizer", "adamw"}},
      {"seed_amp.txt", {"--params", "7B", "--optimizer", "adamw", "--amp"}},
      {"seed_mixed.txt", {"--params", "7B", "--optimizer", "adamw", "--precision", "mixed"}},
      {"seed_bf16.txt", {"--params", "7B", "--optimizer", "adamw", "--precision", "bf16"}},
      {"seed_article.txt",
       {"--params", "7B", "--optimizer", "adamw", "--precision", "mixed", "--grad-dtype", "fp16",
        "--state-dtype", "fp16"}},
      {"seed_amp.json", {"--params", "7B", "--optimizer", "adamw", "--amp", "--format", "json"}},
      {"seed_fp32_gib.txt", {"--params", "7B", "--units", "GiB"}},
      {"seed_bf16_h100.md",
       {"--params", "7B", "--precision", "bf16", "--gpu", "h100-80gb", "--format", "markdown"}},
      {"seed_mixed_h100.txt",
       {"--params", "7B", "--precision", "mixed-bf16", "--gpu", "h100-80gb"}},
  }));
  CAPTURE(name);
  auto r = run_cli(args);
  REQUIRE(r.err.empty());
  // 16 B/param of 7B (112 GB) is over an H100's 84.45 GB usable: exit 1, as the README says.
  REQUIRE(r.code == (name == "seed_mixed_h100.txt" ? 1 : 0));
  expect_golden(name, r.out);
}

TEST_CASE("JSON carries exact integer bytes under stable keys", "[cli]") {
  auto r = run_cli({"--params", "7B", "--optimizer", "adamw", "--format", "json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["schema_version"] == 2);
  REQUIRE(j["categories"]["params"]["bytes"] == 28'000'000'000ULL);
  REQUIRE(j["categories"]["grads"]["bytes"] == 28'000'000'000ULL);
  REQUIRE(j["categories"]["optimizer_states"]["bytes"] == 56'000'000'000ULL);
  REQUIRE(j["categories"]["activations"]["bytes"].is_null());
  REQUIRE(j["total"]["bytes"] == 112'000'000'000ULL);
  REQUIRE(j["inputs"]["optimizer"]["name"] == "adamw");  // a run config: --file takes it
  REQUIRE(j["inputs"]["model"]["params"] == "7B");
  REQUIRE(j["run"]["precision"]["param_dtype"] == "fp32");  // the run as resolved
  REQUIRE(j["parameters"]["total"] == 7'000'000'000ULL);
}

TEST_CASE("bad input: one line naming the flag, the value and what is accepted, exit 2",
          "[cli][errors]") {
  auto [args, message] = GENERATE(table<std::vector<std::string>, std::string>({
      {{"--params", "7B", "--optimizer", "adamw8"},
       "memest: error: --optimizer: unknown optimizer \"adamw8\" (expected one of: sgd, "
       "sgd-momentum, adam, adamw, adagrad, rmsprop, lion, adafactor, adam8bit)"},
      {{"--params", "7B", "--param-dtype", "fp64"},
       "memest: error: --param-dtype: unknown dtype \"fp64\" (expected one of: fp32, fp16, bf16, "
       "fp8_e4m3, fp8_e5m2, int8, int4, nf4)"},
      {{"--params", "7B", "--precision", "apex"},
       "memest: error: --precision: unknown precision policy \"apex\" (expected one of: fp32, amp, "
       "amp-bf16, mixed, mixed-bf16, mixed-fp32grad, mixed-bf16-fp32grad, bf16, fp16)"},
      {{"--params", "7B", "--units", "gigabytes"},
       "memest: error: --units: unknown unit \"gigabytes\" (expected one of: bytes, kB, KiB, MB, "
       "MiB, GB, GiB, TB, TiB)"},
      {{"--params", "-7B"},
       "memest: error: --params: not a count: \"-7B\" (expected a positive whole count such as 7B, "
       "6.7B, 125M, 1.3e9 or 6738415616)"},
      {{"--params", "0"},
       "memest: error: --params: count must be positive, got \"0\" (expected a positive whole "
       "count such as 7B, 6.7B, 125M, 1.3e9 or 6738415616)"},
      {{"--params", "1.5"},
       "memest: error: --params: not a whole number: \"1.5\" (expected a positive whole count "
       "such as 7B, 6.7B, 125M, 1.3e9 or 6738415616)"},
      {{"--params", "nan"},
       "memest: error: --params: not a count: \"nan\" (expected a positive whole count such as "
       "7B, 6.7B, 125M, 1.3e9 or 6738415616)"},
      {{"--params", "1e25"},
       "memest: error: --params: count too large: \"1e25\" (expected a positive whole count such "
       "as 7B, 6.7B, 125M, 1.3e9 or 6738415616)"},
      {{"--params", "10000000000000000000"},
       "memest: error: size overflow: the estimate exceeds 2^64 bytes (18.4 EB); check the inputs"},
      {{"--params", "7B", "--amp", "--precision", "bf16"},
       "memest: error: --amp conflicts with --precision \"bf16\" (--amp is short for --precision "
       "amp)"},
      {{"--params", "7B", "--nesterov"},
       "memest: error: --nesterov: applies only to optimizer sgd-momentum, got optimizer "
       "\"adamw\""},
      {{"--params", "7B", "--format", "yaml"},
       "memest: error: --format: unknown format \"yaml\" (expected one of: table, json, markdown)"},
      {{"--optimizer", "adamw"},
       "memest: error: no model given: pass --params N (e.g. 7B), --model NAME or --config PATH"},
      {{"--params", "7B", "--batch", "4"},
       "memest: error: --batch needs --seq as well (activations depend on both)"},
      {{"--params", "7B", "--batch", "four", "--seq", "8"},
       "memest: error: --batch: expected a positive whole number of sequences, got \"four\""},
      {{"--params", "7B", "--dropout", "1.5"},
       "memest: error: --dropout: expected a probability in [0, 1), got \"1.5\""},
      {{"--model", "llama-2-7b", "--qlora"}, "memest: error: --qlora needs --lora-rank"},
      {{"--model", "llama-2-7b", "--lora-rank", "8", "--qlora-init", "whole"},
       "memest: error: --qlora-init needs --qlora"},
      {{"--model", "llama-2-7b", "--lora-rank", "8", "--qlora", "--qlora-init", "cpu"},
       "memest: error: --qlora-init: unknown QLoRA quantisation \"cpu\" (expected one of: none, "
       "whole, chunked)"},
      {{"--model", "llama-2-7b", "--lora-rank", "8", "--lora-targets", "q,x"},
       "memest: error: --lora-targets: unknown LoRA target \"x\" (expected one of: q, k, v, o, "
       "gate, up, down, all-linear)"},
      {{"--model", "llama-2-7b", "--freeze", "embeddings"},
       "memest: error: --freeze: unknown role \"embeddings\" (expected one of: embedding, "
       "position, attention, mlp, norm, head, router, expert, adapter, vision, other)"},
      {{"--model", "gpt2", "--freeze", "embedding,position,attention,mlp,norm"},
       "memest: error: --freeze: \"embedding,position,attention,mlp,norm\" freezes every "
       "parameter of the model, so nothing trains (expected at least one trainable role, or "
       "--lora-rank R for adapters on a frozen base; for inference memory use memest serve)"},
      {{"--params", "7B", "--gpu", "h100"},
       "memest: error: --gpu: unknown GPU \"h100\" (did you mean \"h100-80gb\"?) (expected one of: "
       "t4, "
       "v100-16gb, v100-32gb, a10, l4, rtx-3090, rtx-4090, a100-40gb, l40s, a100-80gb, h100-80gb, "
       "h100-nvl-94gb, h200-141gb, b200-192gb, mi250x, mi300x, gaudi2, gaudi3)"},
      {{"--architecture", "{\"model_type\": \"gpt2\", \"n_layer\": 2}"},
       "memest: error: --architecture: /vocab_size: missing required key"},
      {{"--params", "7B", "--model", "gpt2"},
       "memest: error: conflicting model settings: --params \"7B\" and --model \"gpt2\" (give "
       "exactly one)"},
      {{"--params", "7B", "--zero", "2"},
       "memest: error: --zero shards over data-parallel ranks: give --dp N with N > 1"},
      {{"--params", "7B", "--dp", "8", "--zero", "4"},
       "memest: error: --zero: unknown ZeRO stage \"4\" (expected one of: 0, 1, 2, 3)"},
      {{"--params", "7B", "--offload", "cpu"},
       "memest: error: --offload: unknown offload \"cpu\" (expected none, or a comma-separated "
       "list "
       "of: optimizer, params, activations)"},
      {{"--params", "7B", "--optimizer-impl", "single", "--fused-optimizer"},
       "memest: error: --fused-optimizer conflicts with --optimizer-impl \"single\" "
       "(--fused-optimizer is short for --optimizer-impl fused)"},
      {{"--params", "7B", "--optimizer-impl", "apex"},
       "memest: error: --optimizer-impl: unknown optimizer implementation \"apex\" (expected one "
       "of: foreach, single, fused)"},
      {{"--params", "7B", "--bogus"},
       "memest: error: The following argument was not expected: --bogus (see memest --help)"},
      {{"--params"}, "memest: error: --params: 1 required COUNT missing (see memest --help)"},
  }));
  CAPTURE(args);
  auto r = run_cli(args);
  REQUIRE(r.code == 2);
  REQUIRE(r.out.empty());
  REQUIRE(r.err == message + "\n");
}

TEST_CASE("--help and --version exit 0", "[cli]") {
  auto h = run_cli({"--help"});
  REQUIRE(h.code == 0);
  REQUIRE_THAT(h.out, Catch::Contains("--params") && Catch::Contains("Examples:") &&
                          Catch::Contains("Exit codes"));
  auto v = run_cli({"--version"});
  REQUIRE(v.code == 0);
  REQUIRE_THAT(v.out, Catch::StartsWith("memest "));
}

TEST_CASE("LoRA on Llama-2-7B: the base is frozen, the adapters train", "[cli]") {
  // r=16 on q and v: 32 layers x 2 modules x 16 x (4096 + 4096) = 8,388,608 (PEFT prints the same).
  auto r = run_cli({"--model", "llama-2-7b", "--lora-rank", "16", "--lora-targets", "q,v",
                    "--precision", "bf16", "--format", "json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["parameters"]["trainable"] == 8'388'608);
  REQUIRE(j["parameters"]["total"] == 6'738'415'616ULL + 8'388'608);
  REQUIRE(j["categories"]["grads"]["bytes"] == 2 * 8'388'608);
  REQUIRE(j["categories"]["optimizer_states"]["bytes"] == 2 * 2 * 8'388'608);
  REQUIRE(j["categories"]["params"]["bytes"] == 2 * (6'738'415'616ULL + 8'388'608));
}

TEST_CASE("the JSON parameter inventory sums to the total, per role and per group", "[cli]") {
  auto r = run_cli({"--model", "mixtral-8x7b", "--format", "json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  const std::uint64_t total = j["parameters"]["total"];
  REQUIRE(total == 46'702'792'704ULL);
  REQUIRE(j["parameters"]["active"] == 12'879'925'248ULL);
  std::uint64_t by_role = 0, by_group = 0;
  for (const auto& [role, t] : j["parameters"]["by_role"].items())
    by_role += t["params"].get<std::uint64_t>();
  for (const auto& g : j["parameters"]["groups"]) by_group += g["elements"].get<std::uint64_t>();
  REQUIRE(by_role == total);
  REQUIRE(by_group == total);
  auto explain = run_cli({"--model", "gpt2", "--explain"});
  REQUIRE_THAT(explain.out,
               Catch::Contains("parameters by role") && Catch::Contains("transformer.wte.weight"));
}

TEST_CASE("the shipped JSON Schema is the one the option table generates", "[cli][schema]") {
  auto r = run_cli({"schema"});
  REQUIRE(r.code == 0);
  const std::string path = std::string(MEMEST_SOURCE_DIR) + "/configs/schema/run.schema.json";
  if (const char* u = std::getenv("MEMEST_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << r.out;
  }
  REQUIRE(r.out == memest::test::read_file(path));
}

TEST_CASE("every example run config passes memest check", "[cli][check]") {
  std::vector<std::string> args = {"check"};
  for (const auto& e : std::filesystem::directory_iterator("configs/examples")) {
    args.push_back(e.path().string());
  }
  REQUIRE(args.size() >= 5);
  auto r = run_cli(args);
  CAPTURE(r.out, r.err);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains(fmt::format("{} fit, 0 over, 0 invalid", args.size() - 1)));
}

// --from takes a file and its KEY=VALUE overrides, so before check's files it takes them too:
// either order gets the same line, and check without files says what it needs.
TEST_CASE("check refuses --from in either order, and asks for files", "[cli][check]") {
  const std::string from = "tests/data/gpu/from/torchtitan-9dec370-llama3_8b.toml";
  const std::string file = "configs/examples/gpt2-amp-t4.json";
  for (const auto& args : {std::vector<std::string>{"check", "--from", from, file},
                           std::vector<std::string>{"check", file, "--from", from}}) {
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: --from: not used by check (it checks run config files)\n");
  }
  const auto none = run_cli({"check"});
  CHECK(none.code == 2);
  CHECK(none.err == "memest: error: check: give one or more run config files (JSON)\n");
}

TEST_CASE("check: exit 1 when some are over, 2 when some are invalid, and JSON", "[cli][check]") {
  auto over = run_cli({"check", "configs/examples/tinyllama-1.1b-h100.json", "--gpu", "t4"});
  REQUIRE(over.code == 1);
  REQUIRE_THAT(over.out,
               Catch::Contains(": over by ") && Catch::Contains("0 fit, 1 over, 0 invalid"));
  auto invalid =
      run_cli({"check", "configs/examples/gpt2-amp-t4.json", "tests/data/bad/typo_key.json"});
  REQUIRE(invalid.code == 2);
  REQUIRE_THAT(invalid.out,
               Catch::Contains("tests/data/bad/typo_key.json: invalid: /training/seq_lenght: "
                               "unknown key (did you mean \"seq_len\"?)"));
  auto json = run_cli({"check", "configs/examples/gpt2-amp-t4.json", "--format", "json"});
  REQUIRE(json.code == 0);
  auto j = nlohmann::json::parse(json.out);
  REQUIRE(j["results"][0]["status"] == "fits");
  REQUIRE(j["results"][0]["need_bytes"].get<std::uint64_t>() +
              j["results"][0]["headroom_bytes"].get<std::uint64_t>() ==
          j["results"][0]["usable_bytes"].get<std::uint64_t>());
  REQUIRE(j["summary"]["fits"] == 1);
}

TEST_CASE("an inline architecture in a run config reproduces a measured case", "[cli][config]") {
  // tests/data/truth: llama-s_fp32_adamw_b4s128, measured with PyTorch (pytorch2 figures).
  auto r = run_cli({"--file", "configs/examples/tiny-llama-inline-cpu.json", "--format", "json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["parameters"]["total"] == 6'998'272);
  REQUIRE(j["categories"]["activations"]["bytes"] == 69'916'708);
  REQUIRE(j["peak"]["bytes"] == 186'664'196);
}

TEST_CASE("fit and compare keep a run config's own settings", "[cli][search]") {
  // fit's defaults (1 sequence, 2048 tokens) fill only what neither the file nor a flag gives:
  // the file's 4096-token sequence stays.
  auto fit = run_cli({"fit", "--file", "configs/examples/llama-2-7b-budget.json"});
  REQUIRE(fit.code == 0);
  REQUIRE_THAT(fit.out, Catch::Contains("at sequence length 4096"));
  // compare replaces the file's precision preset with each listed policy.
  auto cmp =
      run_cli({"compare", "--file", "configs/examples/llama-2-7b-budget.json", "--format", "json"});
  REQUIRE(cmp.code == 0);
  auto j = nlohmann::json::parse(cmp.out);
  REQUIRE(j["runs"].size() == 4);
  REQUIRE(j["runs"][0]["precision"]["name"] == "fp32");
}

TEST_CASE("explain prints each saved tensor with the formula that sized it", "[cli]") {
  const auto r = run_cli({"--model", "llama-2-7b", "--batch", "1", "--seq", "2048", "--explain"});
  REQUIRE(r.code == 0);
  // RMSNorm's fp32 input: 4 B x N x h = 4 x 2048 x 4096 = 33,554,432 bytes, once per layer.
  const auto at = r.out.find("input RMSNorm: fp32 input (pow, mul)");
  REQUIRE(at != std::string::npos);
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  CHECK(line.find("33,554,432") != std::string::npos);
  CHECK(line.find("4*N*h = 4 x 2048 x 4096") != std::string::npos);
  CHECK(line.find("x 32") != std::string::npos);
  // The peak's live tensors, by name, each in its part.
  CHECK(r.out.find("live at the peak, tensor by tensor") != std::string::npos);
  CHECK(r.out.find("Adam step: exp_avg_sq.sqrt() and the quotient (denom)") != std::string::npos);
}

TEST_CASE("a plain estimate answers the same without CLI11 as with it", "[cli]") {
  // run() parses `--name value` estimates itself (start-up time); anything else goes to CLI11.
  const std::vector<std::vector<std::string>> cases = {
      {"--params", "7B", "--optimizer", "adamw", "--amp"},
      {"--model", "llama-2-7b", "--batch", "4", "--seq", "4096", "--precision", "bf16",
       "--attention", "flash", "--recompute", "full", "--gpu", "h100-80gb"},
      {"--model", "gpt2", "--batch", "2", "--seq", "128", "--explain", "--format", "json"},
      {"--file", "configs/examples/gpt2-amp-t4.json", "--units", "GiB"},
      {"--model", "check"},                    // a subcommand name is never a value
      {"--params", "7B", "--params", "7B"},    // CLI11 decides what a repeat means
      {"--params=7B"},                         // and what "=" means
      {"--params", "-7B"},                     // and a value that looks like a flag
      {"--params", ""},                        // and an empty one
      {"--params", "7B", "--amp", "--batch"},  // and a missing value
      {"--params", "7B", "--unknown", "1"},    // and an unknown name
      {"--params", "7B", "--format", "yaml"},  // errors of the run itself come from one place
  };
  for (auto args : cases) {
    CAPTURE(args);
    args.insert(args.begin(), "memest");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    std::ostringstream out1, err1, out2, err2;
    const int plain = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out1, err1);
    const int cli11 = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out2, err2,
                                       memest::cli::Parser::cli11_only);
    REQUIRE(plain == cli11);
    REQUIRE(out1.str() == out2.str());
    REQUIRE(err1.str() == err2.str());
  }
}

TEST_CASE("issue 12: a plain estimate over its budget exits 1, and its JSON says so", "[cli]") {
  auto over = run_cli({"--params", "7B", "--budget", "80GB", "--format", "json"});
  REQUIRE(over.code == 1);
  auto j = nlohmann::json::parse(over.out);
  REQUIRE(j["budget"]["fits"] == false);
  REQUIRE(j["budget"]["need_bytes"] == 112'000'000'000ULL);
  REQUIRE(j["budget"]["over_bytes"] == 32'000'000'000ULL);
  auto fits = run_cli({"--params", "7B", "--budget", "200gb", "--format", "json"});
  REQUIRE(fits.code == 0);
  j = nlohmann::json::parse(fits.out);
  REQUIRE(j["budget"]["headroom_bytes"] == 88'000'000'000ULL);
  REQUIRE(nlohmann::json::parse(run_cli({"--params", "7B", "--format", "json"}).out)["budget"]
              .is_null());
}

TEST_CASE("issue 12: misleading inputs are refused or warned about", "[cli]") {
  auto [args, code, text] = GENERATE(table<std::vector<std::string>, int, std::string>({
      {{"--params", "7B", "--budget", "80"},
       2,
       "memest: error: --budget: a size needs a unit: \"80\" (expected a size with a unit such as "
       "80GiB, 80GB, 512MiB or 4096B)\n"},
      {{"--params", "7B", "--gpu", "h100-80gb", "--context-reserve", "2GiB", "--reserve", "1GiB"},
       2,
       "memest: error: --reserve \"1GiB\" conflicts with --context-reserve \"2GiB\" (both count "
       "the CUDA context: --reserve takes it from the budget, --context-reserve adds it to the "
       "need; give one)\n"},
      {{"--model", "gpt2", "--precision", "mixed-bf16", "--param-dtype", "int8"},
       2,
       "memest: error: --param-dtype: int8 parameters cannot be trained (autograd gives gradients "
       "to floating-point tensors only): store a frozen base in 4 bits with --lora-rank R "
       "--qlora, or use fp32, bf16 or fp16\n"},
      {{"sweep", "--model", "gpt2"},
       2,
       "memest: error: sweep needs a list to sweep: --batches, --seqs, --policies or "
       "--optimizers\n"},
  }));
  CAPTURE(args);
  auto r = run_cli(args);
  REQUIRE(r.code == code);
  REQUIRE(r.err == text);
}

TEST_CASE("issue 12: warnings and notes in the table", "[cli]") {
  auto r = run_cli({"--model", "gpt2", "--batch", "1", "--seq", "4096"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, Catch::Contains("warning: sequence length 4,096 is past the 1,024 positions "
                                      "of gpt2's learned position embedding"));
  r = run_cli({"--params", "7B", "--dp", "8"});
  REQUIRE_THAT(r.out, Catch::Contains("note: --dp 8 without --zero is plain DDP"));
  // The context reserve replaces the default reserve instead of adding to it.
  r = run_cli(
      {"--params", "7B", "--gpu", "h100-80gb", "--context-reserve", "2GiB", "--format", "json"});
  REQUIRE(nlohmann::json::parse(r.out)["budget"]["reserve_bytes"] == 0);
}

TEST_CASE("issue 12: one unit per column and per line", "[cli]") {
  auto r = run_cli({"compare", "--params", "7B", "--policies", "mixed-bf16,mixed-bf16-fp32grad"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, !Catch::Contains("mixed-bf16mixed"));
  r = run_cli({"--model", "llama-2-7b", "--batch", "1", "--seq", "512", "--units", "gib"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, !Catch::Contains(" GB"));
  REQUIRE_THAT(r.out, Catch::Contains("< 0.01 GiB (host)"));
  REQUIRE_THAT(r.out, Catch::Contains("B/param"));
  r = run_cli(
      {"check", std::string(MEMEST_SOURCE_DIR) + "/configs/examples/llama-2-7b-budget.json"});
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.out, !Catch::Contains("GiB"));
}

// A flag takes an optional value as CLI11 reads one: --compile=false is off (as a run config's
// false), anything but a true or false word one line and exit 2.
TEST_CASE("a flag given false is off, and given another word refused", "[cli]") {
  using memest::test::run_cli;
  const auto json_of = [](const std::string& flag) {
    return memest::test::run_json({"--model", "gpt2", flag});
  };
  CHECK(json_of("--compile=false")["inputs"]["training"]["compile"] == false);
  CHECK(json_of("--compile")["inputs"]["training"]["compile"] == true);
  CHECK(json_of("--compile=true")["inputs"]["training"]["compile"] == true);
  const auto bad = run_cli({"--model", "gpt2", "--compile=maybe"});
  CHECK(bad.code == 2);
  CHECK(bad.err ==
        "memest: error: Could not convert: --compile = maybe (expected true or false, or no "
        "value)\n");
}
