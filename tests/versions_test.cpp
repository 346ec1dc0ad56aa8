// --versions: the package versions that decide a stack's defaults that changed over time. Each
// versioned default is flipped across its boundary; where the bytes it moves follow from the
// tensors' shapes alone, they are checked exactly.
#include "input/versions.hpp"

#include "input/stack_presets.hpp"
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/run_options.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using memest::parse_version;
using memest::test::run_cli;
using memest::test::run_json;
using nlohmann::json;

namespace {

memest::Version v(std::string_view text) {
  const auto parsed = parse_version(text);
  REQUIRE(parsed);
  return *parsed;
}

// The version just before `text`: its last number less one, or, at 0, the one before it less one
// and .99 ("2.0" -> "1.99", "0.43.2" -> "0.43.1").
std::string just_below(std::string_view text) {
  auto n = v(text).numbers;
  if (n.back() > 0) {
    --n.back();
  } else {
    n.pop_back();
    --n.back();
    n.push_back(99);
  }
  return fmt::format("{}", fmt::join(n, "."));
}

std::vector<std::string> with(std::vector<std::string> base,
                              std::initializer_list<std::string> more) {
  base.insert(base.end(), more);
  return base;
}

// The bytes of moment `name` in the estimate's walk.
std::int64_t moment(const json& j, std::string_view name) {
  for (const auto& m : j["peak"]["moments"])
    if (m["name"] == name) return m["bytes"].get<std::int64_t>();
  FAIL("no moment " << name);
  return 0;
}

std::int64_t activation(const json& j, const char* key) {
  return j["activations"][key].get<std::int64_t>();
}

const std::vector<std::string> kGpt2 = {"--model", "gpt2",        "--batch", "2",       "--seq",
                                        "128",     "--attention", "eager",   "--stack", "hf"};
const std::vector<std::string> kTinyLlama = {"--model", "tinyllama-1.1b", "--batch", "1", "--seq",
                                             "256",     "--precision",    "bf16"};

}  // namespace

TEST_CASE("a version compares by its numbers, a suffix ignored", "[versions]") {
  CHECK(v("1.10") > v("1.9"));
  CHECK(v("1.10") == v("1.10.0"));
  CHECK(v("2.1.0+cu121") == v("2.1"));
  CHECK(v("0.43.2") > v("0.43.1"));
  CHECK(v("2.1.0rc0") == v("2.1.0"));
  CHECK(v("4.16.0.dev0") < v("4.45"));
  for (const auto* bad : {"", "1.x", "a1", "1..2", "1.", ".1", "-1", "2.4 beta"}) {
    INFO(bad);
    CHECK_FALSE(parse_version(bad));
  }
}

TEST_CASE("bad --versions is one line naming the flag, the value and what is accepted",
          "[versions]") {
  const auto err = [](const std::string& value) {
    const auto r = run_cli({"--model", "gpt2", "--stack", "hf", "--versions", value});
    CHECK(r.code == 2);
    return r.err;
  };
  CHECK(err("torch") ==
        "memest: error: --versions: \"torch\" is not PACKAGE=VERSION (expected PACKAGE=VERSION, "
        "comma-separated, as torch=2.4,transformers=4.46)\n");
  CHECK(
      err("pytorch=2.4")
          .starts_with(
              "memest: error: --versions: unknown package \"pytorch\" (expected one of: torch, "));
  CHECK(err("torch=two") ==
        "memest: error: --versions: torch: \"two\" is not a version (expected numbers separated "
        "by dots, as 2.4 or 0.43.2)\n");
  CHECK(err("torch=2.4,torch=2.5") == "memest: error: --versions: torch is given twice\n");
  CHECK(err("{\"torch\": 2}") ==
        "memest: error: --versions: \"{\"torch\": 2}\" is not a JSON object of versions "
        "(expected PACKAGE=VERSION, comma-separated, as torch=2.4,transformers=4.46, or "
        "{\"torch\": \"2.4\"})\n");
  const auto alone = run_cli({"--model", "gpt2", "--versions", "torch=1.10"});
  CHECK(alone.code == 2);
  CHECK(alone.err ==
        "memest: error: --versions needs --stack (the versions decide which of a "
        "stack's defaults apply)\n");
  // The web form gives the run-config object as JSON text.
  const json j =
      run_json({"--model", "gpt2", "--stack", "hf", "--versions", R"({"torch": "1.10"})"});
  CHECK(j["inputs"]["training"]["versions"] == json{{"torch", "1.10"}});
  CHECK(j["inputs"]["training"]["softmax_keeps_input"] == true);
  CHECK(err("") ==
        "memest: error: --versions: no versions given (expected PACKAGE=VERSION, "
        "comma-separated, as torch=2.4,transformers=4.46)\n");
}

TEST_CASE("a run config gives versions as an object of strings", "[versions]") {
  const auto path = std::filesystem::temp_directory_path() / "memest-versions-run.json";
  std::ofstream(path) << R"({"model": {"name": "gpt2"}, "training": {"stack": "hf",)"
                      << R"( "versions": {"torch": "1.10"}}})";
  const json j = run_json({"--file", path.string()});
  CHECK(j["inputs"]["training"]["versions"] == json{{"torch", "1.10"}});
  CHECK(j["inputs"]["training"]["softmax_keeps_input"] == true);
  std::ofstream(path) << R"({"model": {"name": "gpt2"}, "training": {"stack": "hf",)"
                      << R"( "versions": {"torch": 1.10}}})";
  const auto r = run_cli({"--file", path.string()});
  CHECK(r.code == 2);
  CHECK(r.err == fmt::format("memest: error: {}: /training/versions/torch: expected a string, got "
                             "number 1.1\n",
                             path.string()));
  std::filesystem::remove(path);
}

TEST_CASE("every versioned default holds on its side of the boundary only", "[versions]") {
  for (const auto& stack : memest::stack_presets()) {
    for (const auto& d : stack.defaults) {
      if (d.versions.package.empty()) continue;
      const std::string package(d.versions.package);
      const std::string inside =
          d.versions.below.empty() ? std::string(d.versions.from) : just_below(d.versions.below);
      const std::string outside =
          d.versions.below.empty() ? just_below(d.versions.from) : std::string(d.versions.below);
      INFO(stack.name << " " << d.flag << " " << d.value << " " << package << " " << inside);
      auto base = with(kTinyLlama, {"--stack", std::string(stack.name)});
      if (!d.needs.empty()) base = with(base, {"--lora-rank", "8"});
      if (d.needs == "--qlora") base = with(base, {"--qlora", "--allocator", "cuda"});
      if (d.needs == "--fsdp")
        base = with(base, {"--dp", "2", "--fsdp", "full", "--allocator", "cuda"});
      const json in = run_json(with(base, {"--versions", package + "=" + inside}));
      const json out = run_json(with(base, {"--versions", package + "=" + outside}));
      const memest::RunOptionInfo& info = memest::run_option(d.flag);
      const std::string key = info.alias_of.empty() ? info.key : "loading";
      const std::string section = info.alias_of.empty() ? info.section : "model";
      CHECK(in["inputs"][section][key] != out["inputs"][section][key]);
      // The version gives what the flag typed gives.
      auto typed = with(base, {"--versions", package + "=" + inside, std::string(d.flag)});
      if (d.value != "on") typed.emplace_back(d.value);
      json flagged = run_json(typed);
      const std::string line = fmt::format("{}{} (--stack {}, {} {} ", d.flag,
                                           d.value == "on" ? "" : " " + std::string(d.value),
                                           stack.name, package, inside);
      bool said = false;
      for (const auto& a : in["assumptions"]) said = said || a.get<std::string>().starts_with(line);
      CHECK(said);
      json a = in;
      for (auto* doc : {&a, &flagged}) {
        doc->erase("assumptions");
        doc->erase("inputs");
      }
      CHECK(a == flagged);
    }
  }
}

TEST_CASE("a package not given is its newest release, and the output says so", "[versions]") {
  const json j = run_json(kGpt2);
  bool said = false;
  for (const auto& a : j["assumptions"])
    said = said || a.get<std::string>().starts_with(
                       "--zero-grad none (--stack hf, torch not in --versions, so its newest "
                       "release): ");
  CHECK(said);
  CHECK(j["inputs"]["training"]["softmax_keeps_input"] == false);
  // A flag the user gives another value is no assumption.
  const json z = run_json(with(kGpt2, {"--zero-grad", "zero"}));
  for (const auto& a : z["assumptions"])
    CHECK_FALSE(a.get<std::string>().starts_with("--zero-grad"));
}

// torch 1.11 dropped softmax's input (pytorch/pytorch#65242): with torch 1.10 eager attention
// keeps the fp32 scores, b x heads x s x s x 4 B a layer, and the loss's log_softmax its fp32
// N x V logits.
TEST_CASE("torch 1.10 against 1.11: softmax's input", "[versions]") {
  const json old = run_json(with(kGpt2, {"--versions", "torch=1.10"}));
  const json now = run_json(with(kGpt2, {"--versions", "torch=1.11"}));
  CHECK(activation(old, "per_layer_bytes") - activation(now, "per_layer_bytes") ==
        4 * 2 * 12 * 128 * 128);
  CHECK(activation(old, "head_bytes") - activation(now, "head_bytes") == 4 * 2 * 128 * 50257);
}

// torch 2.0 made zero_grad(set_to_none=True) the default: with 1.13 the fp32 gradients of all
// 124,439,808 parameters of GPT-2 stay through the next step's forward.
TEST_CASE("torch 1.13 against 2.0: gradients kept between steps", "[versions]") {
  const json old = run_json(with(kGpt2, {"--versions", "torch=1.13"}));
  const json now = run_json(with(kGpt2, {"--versions", "torch=2.0"}));
  CHECK(moment(old, "forward_end") - moment(now, "forward_end") == 4 * 124'439'808LL);
  CHECK(moment(old, "optimizer") == moment(now, "optimizer"));
}

// transformers 4.45 stopped returning fp32 logits: with 4.44 the bf16 model's N x V logits are
// fp32 at the end of forward, 4 NV where 4.45 has 2 NV (N = 256, V = 32000).
TEST_CASE("transformers 4.44 against 4.45: the logits' dtype", "[versions]") {
  const auto base = with(kTinyLlama, {"--stack", "hf"});
  const json old = run_json(with(base, {"--versions", "transformers=4.44"}));
  const json now = run_json(with(base, {"--versions", "transformers=4.45"}));
  CHECK(moment(old, "forward_end") - moment(now, "forward_end") == 2 * 256 * 32000);
}

// bitsandbytes 0.43.2 dropped MatMul4Bit's input (PR #1270). With bf16 adapters on q, k, v, gate
// and up their inputs (the norms' outputs) are kept anyway, and o_proj's is the attention's
// output, which SDPA keeps for its own backward; 0.43.1 adds down_proj's bf16 input, N x I, in
// every layer: 2 x 256 x 5632 B.
TEST_CASE("bitsandbytes 0.43.1 against 0.43.2: each 4-bit linear's input", "[versions]") {
  for (const char* stack : {"hf", "litgpt", "fsdp-qlora"}) {
    INFO(stack);
    const auto base = with(kTinyLlama, {"--stack", stack, "--lora-rank", "8", "--qlora",
                                        "--lora-targets", "q,k,v,gate,up", "--model-code", "hf",
                                        "--lora-dropout", "0", "--recompute", "none"});
    const json old = run_json(with(base, {"--versions", "bitsandbytes=0.43.1"}));
    const json now = run_json(with(base, {"--versions", "bitsandbytes=0.43.2"}));
    // Under PEFT (hf, from 0.11) the adapters are fp32 and keep their own fp32 casts, so the
    // 4-bit linears of q/k/v and gate/up add their bf16 inputs too: 2 x 256 x 2048 each.
    const std::int64_t extra = std::string_view(stack) == "hf" ? 2 * 2048 : 0;
    CHECK(activation(old, "per_layer_bytes") - activation(now, "per_layer_bytes") ==
          2 * 256 * (5632 + extra));
  }
}
