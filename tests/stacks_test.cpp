// --stack: a training stack's defaults, laid under the run's own flags and file.
#include "input/stacks.hpp"

#include "testutil.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

using memest::test::read_file;
using memest::test::run_cli;
using memest::test::run_json;
using nlohmann::json;

namespace {

enum class Adapters { none, lora, qlora };

// The stack's defaults spelled out as flags, as a user would type them without --stack.
std::vector<std::string> spelled_out(const memest::StackPreset& s, Adapters a) {
  std::vector<std::string> out;
  for (const auto& d : s.defaults) {
    if (d.needs == "--lora-rank" && a == Adapters::none) continue;
    if (d.needs == "--qlora" && a != Adapters::qlora) continue;
    if (d.needs.starts_with("--fsdp")) continue;  // the runs below are on one device
    // No --versions: each package at its newest; llama-3.2-1b is no Llama-2.
    if (!d.versions.below.empty() || !d.model.empty()) continue;
    if (d.routed_experts) continue;  // llama-3.2-1b has no routed experts
    out.emplace_back(d.flag);
    if (d.value != "on") out.emplace_back(d.value);
  }
  return out;
}

}  // namespace

TEST_CASE("a stack gives the estimate its defaults spelled out as flags give", "[stacks]") {
  for (const auto& s : memest::stack_presets()) {
    for (const auto adapters : {Adapters::none, Adapters::lora, Adapters::qlora}) {
      INFO("stack " << s.name << " adapters " << static_cast<int>(adapters));
      std::vector<std::string> base = {"--model", "llama-3.2-1b", "--batch",     "2",
                                       "--seq",   "512",          "--precision", "bf16"};
      if (adapters != Adapters::none) base.insert(base.end(), {"--lora-rank", "16"});
      // QLoRA's defaults (how the base is quantised) show in the allocator replay's set-up.
      if (adapters == Adapters::qlora) base.insert(base.end(), {"--qlora", "--allocator", "cuda"});
      auto with = base;
      with.insert(with.end(), {"--stack", std::string(s.name)});
      auto flags = base;
      const auto spelled = spelled_out(s, adapters);
      flags.insert(flags.end(), spelled.begin(), spelled.end());
      json a = run_json(with), b = run_json(flags);
      CHECK(a["inputs"]["training"]["stack"] == s.name);
      CHECK(a["run"]["training"]["stack"] == s.name);
      a["inputs"]["training"].erase("stack");
      a["run"]["training"]["stack"] = nullptr;
      // The defaults a version decided are said as assumptions: the flags typed are not.
      auto& said = a["assumptions"];
      while (!said.empty() && said[0].get<std::string>().starts_with("--")) said.erase(0);
      CHECK(a == b);
    }
  }
}

TEST_CASE("a flag or a run-config key overrides the stack's default", "[stacks]") {
  const json j = run_json({"--model", "gpt2", "--stack", "megatron", "--attention", "eager"});
  CHECK(j["inputs"]["training"]["attention"] == "eager");
  CHECK(j["inputs"]["training"]["loss"] == "vocab-parallel");  // the stack's, not overridden
  CHECK(j["run"]["training"]["attention"] == "eager");
  const json f = run_json({"--model", "gpt2", "--stack", "megatron", "--fused-optimizer"});
  CHECK(f["inputs"]["optimizer"]["impl"] == "fused");  // a short flag does not conflict
  const auto path = std::filesystem::temp_directory_path() / "memest-stack-run.json";
  std::ofstream(path) << R"({"model": {"name": "gpt2"}, "training": {"stack": "torchtune",)"
                      << R"( "recompute": "none"}})";
  const json r = run_json({"--file", path.string()});
  CHECK(r["inputs"]["training"]["stack"] == "torchtune");
  CHECK(r["inputs"]["training"]["recompute"] == "none");
  CHECK(r["inputs"]["optimizer"]["impl"] == "fused");
  const json o = run_json({"--file", path.string(), "--stack", "litgpt"});
  CHECK(o["inputs"]["training"]["stack"] == "litgpt");
  CHECK(o["inputs"]["optimizer"]["impl"] == "foreach");
  std::filesystem::remove(path);
}

// A default for models with routed experts (--moe-dispatcher): the dense model's run is the one
// without it, the MoE model's the one with the flag typed, said as an assumption, and its JSON
// reproduces itself (the dispatcher is in `inputs`).
TEST_CASE("a stack's MoE default applies only to a model with routed experts", "[stacks]") {
  const std::vector<std::string> dense = {"--model", "llama-3.2-1b", "--batch",     "1",
                                          "--seq",   "512",          "--precision", "bf16"};
  const std::vector<std::string> moe = {
      "--model",     "mixtral-8x7b", "--batch", "1", "--seq", "512",
      "--precision", "bf16",         "--ep",    "8", "--dp",  "8"};
  const auto with = [](std::vector<std::string> args, std::vector<std::string> more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const auto says = [](const json& j, const std::string& start) {
    for (const auto& line : j["assumptions"])
      if (line.get<std::string>().starts_with(start)) return true;
    return false;
  };
  for (const auto& [stack, dispatcher] :
       {std::pair<std::string, std::string>{"megatron", "allgather"},
        {"torchtitan", "torchtitan"}}) {
    INFO("stack " << stack);
    const json d = run_json(with(dense, {"--stack", stack}));
    CHECK(d["inputs"]["parallel"].value("moe_dispatcher", "hf") == "hf");
    CHECK_FALSE(says(d, "--moe-dispatcher"));
    const json m = run_json(with(moe, {"--stack", stack}));
    CHECK(m["inputs"]["parallel"]["moe_dispatcher"] == dispatcher);
    CHECK(says(m, fmt::format("--moe-dispatcher {} (--stack {}, the model has routed experts): ",
                              dispatcher, stack)));
    const json typed = run_json(with(moe, {"--stack", stack, "--moe-dispatcher", dispatcher}));
    CHECK(typed["activations"] == m["activations"]);
    CHECK(typed["peak"] == m["peak"]);
    const json hf = run_json(with(moe, {"--stack", stack, "--moe-dispatcher", "hf"}));
    CHECK(hf["activations"]["bytes"] != m["activations"]["bytes"]);
    CHECK_FALSE(says(hf, "--moe-dispatcher"));
    memest::test::check_round_trip(with(moe, {"--stack", stack}), "moe-stack-" + stack);
  }
  // Megatron-LM's MoE layer refuses TP without SP: the refusal names where the value came from.
  CHECK_THAT(run_cli(with(moe, {"--stack", "megatron", "--tp", "2"})).err,
             Catch::Contains("--stack megatron (--moe-dispatcher) allgather: Megatron-LM's MoE "
                             "layer refuses --tp 2"));
}

TEST_CASE("an unknown stack is one line naming the flag and the stacks there are", "[stacks]") {
  const auto r = run_cli({"--model", "gpt2", "--stack", "deepspeed"});
  CHECK(r.code == 2);
  CHECK(r.err ==
        "memest: error: --stack: unknown stack \"deepspeed\" (expected one of: hf, torchtune, "
        "litgpt, torchtitan, megatron, fsdp-qlora)\n");
}

TEST_CASE("docs/stacks.md lists every default of every stack with its source", "[stacks]") {
  const std::string doc = read_file(std::string(MEMEST_SOURCE_DIR) + "/docs/stacks.md");
  for (const auto& s : memest::stack_presets()) {
    CHECK(doc.find(fmt::format("## `{}`", s.name)) != std::string::npos);
    for (const auto& d : s.defaults) {
      INFO(s.name << " " << d.flag << " " << d.value);
      const auto typed =
          d.value == "on" ? std::string(d.flag) : fmt::format("{} {}", d.flag, d.value);
      CHECK(doc.find(fmt::format("| `{}` |", typed)) != std::string::npos);
      CHECK(doc.find(std::string(d.source)) != std::string::npos);
    }
  }
}
