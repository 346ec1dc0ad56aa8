// The serve option table: each row is consistent with itself (its kind, names and default), with
// `memest serve --help`, and with what `memest serve` accepts; and each engine's flags are
// refused under the other engine, row by row.
#include "testutil.hpp"

#include <memest/serve_options.hpp>
#include <memest/units.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>

using namespace memest;
using memest::test::run_cli;

namespace {

// A value the row's kind takes (its first name for a choice).
std::string serve_sample(const ServeOptionInfo& f, ServeEngine e) {
  switch (f.kind) {
    case ValueKind::choice:
    case ValueKind::name:
      return std::string(serve_choices(f, e).front());
    case ValueKind::size:
      return "1GiB";
    case ValueKind::fraction:
      return "0.5";
    case ValueKind::path:
      return "no-such-file.json";
    default:
      return "1";
  }
}

// The engines modelled, every one.
std::vector<ServeEngine> serve_engines() {
  return {ServeEngine::vllm, ServeEngine::llama_cpp, ServeEngine::sglang, ServeEngine::hf};
}

// The engines of a row: --help's "[vllm, sglang] " and the refusal's "vLLM and SGLang".
std::vector<ServeEngine> engines_of(const ServeOptionInfo& f) {
  std::vector<ServeEngine> out;
  for (const ServeEngine e : serve_engines()) {
    if (serve_option_applies(f, e)) out.push_back(e);
  }
  return out;
}

// The flags an engine needs before any estimate: hf's two lengths.
std::vector<std::string> needed_flags(ServeEngine e) {
  if (e != ServeEngine::hf) return {};
  return {"--prompt-len", "16", "--max-new-tokens", "4"};
}

}  // namespace

TEST_CASE("serve options: each row's kind, names and default agree", "[serve][options]") {
  for (const ServeOptionInfo& f : serve_option_table()) {
    INFO(f.flag);
    CHECK(f.flag.starts_with("-"));
    CHECK((f.kind == ValueKind::flag) == f.type_name.empty());
    CHECK(find_serve_option(f.flag) == &f);
    const bool named = f.kind == ValueKind::choice || f.kind == ValueKind::name;
    for (const ServeEngine e : serve_engines()) {
      if (!serve_option_applies(f, e)) continue;
      const auto names = serve_choices(f, e);
      CHECK(named == !names.empty());
      // A constant default is one of the names, a count's parses, and the help says it.
      const std::string_view d = f.fallback.value;
      if (d.empty() || f.kind == ValueKind::flag) continue;
      if (named) CHECK(std::find(names.begin(), names.end(), d) != names.end());
      if (f.kind == ValueKind::count) CHECK(parse_count(d) > 0);
      CHECK((f.help.find(fmt::format("(default {}", d)) != std::string::npos ||
             f.help.find(fmt::format("({})", d)) != std::string::npos));
    }
    if (!f.alias_of.empty()) {
      REQUIRE(find_serve_option(f.alias_of) != nullptr);
      CHECK(find_serve_option(f.alias_of)->kind == f.kind);
    }
  }
  CHECK(serve_config_key("--max-model-len") == "max_model_len");
  CHECK(serve_config_key("-h") == "h");
  CHECK(serve_engine_name(ServeEngine::llama_cpp) == "llama.cpp");
}

TEST_CASE("serve options: --help lists every row once, with its engine", "[serve][options]") {
  const auto help = run_cli({"serve", "--help"}).out;
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (f.flag == "-h") continue;
    INFO(f.flag);
    // No prefix on the rows every engine takes; else the engines.
    std::vector<std::string_view> names;
    for (const ServeEngine e : engines_of(f)) names.push_back(serve_engine_name(e));
    const std::string who =
        names.size() == serve_engines().size() ? "" : fmt::format("[{}] ", fmt::join(names, ", "));
    const std::string head =
        fmt::format("  {:<32} {}{}\n", f.flag + " " + f.type_name, who, f.help);
    CHECK(help.find(head) != std::string::npos);
  }
  // The prefix names the engines of a row that not every engine takes.
  CHECK(help.find("  --max-model-len N                [vllm] Longest") != std::string::npos);
  CHECK(help.find("  --ctx-size N                     [llama.cpp] Context") != std::string::npos);
  CHECK(help.find("  --max-new-tokens N               [hf] generate(") != std::string::npos);
  CHECK(help.find("  --dtype NAME                     [vllm, sglang, hf] auto") !=
        std::string::npos);
  CHECK(help.find("  --batch-size N                   [llama.cpp, hf] llama.cpp:") !=
        std::string::npos);
  CHECK(help.find("  --model NAME                     Model preset") != std::string::npos);
}

TEST_CASE("serve options: every name of a choice is taken on its engine", "[serve][options]") {
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (f.kind != ValueKind::choice || !f.config_key || f.flag == "--gpu") continue;
    for (const ServeEngine e : serve_engines()) {
      if (!serve_option_applies(f, e)) continue;
      for (const std::string_view name : serve_choices(f, e)) {
        INFO(f.flag << " " << name);
        std::vector<std::string> args = {"serve", "--model", "llama-3.1-8b", "--gpu-memory",
                                         "200GiB"};
        if (f.flag != "--engine") {
          args.insert(args.end(), {"--engine", std::string(serve_engine_name(e))});
        }
        const ServeEngine run = f.flag != "--engine" ? e
                                : name == "hf"       ? ServeEngine::hf
                                                     : ServeEngine::vllm;
        for (const std::string& n : needed_flags(run)) args.push_back(n);
        args.insert(args.end(), {f.flag, std::string(name)});
        const bool llama = f.flag == "--engine" ? name == "llama.cpp" : e == ServeEngine::llama_cpp;
        if (llama) args.emplace_back("--flash-attn");
        // The quantizer's rules type a file type: --quantizer needs one.
        if (f.flag == "--quantizer") args.insert(args.end(), {"--quantization", "Q4_K_M"});
        const auto r = run_cli(args);
        // Accepted as a name: a GPTQ or AWQ kernel refuses this checkpoint, not the name.
        CHECK(r.err.find("is not offered") == std::string::npos);
        CHECK(r.err.find("unknown") == std::string::npos);
        if (r.code == 2) {
          CHECK((r.err.find("checkpoint's packed weights") != std::string::npos ||
                 r.err.find("not modelled") != std::string::npos));
        }
      }
    }
  }
}

TEST_CASE("serve options: an engine's flag under the other engine is one line, exit 2",
          "[serve][options]") {
  int refused = 0;
  for (const ServeOptionInfo& f : serve_option_table()) {
    for (const ServeEngine e : serve_engines()) {
      if (serve_option_applies(f, e)) continue;
      INFO(f.flag);
      std::vector<std::string> args = {
          "serve", "--model", "llama-3.1-8b", "--engine", std::string(serve_engine_name(e)),
          f.flag};
      const ServeEngine own = engines_of(f).front();
      if (f.kind != ValueKind::flag) args.push_back(serve_sample(f, own));
      const auto r = run_cli(args);
      CHECK(r.code == 2);
      std::vector<std::string_view> owners;
      for (const ServeEngine o : engines_of(f)) {
        owners.push_back(o == ServeEngine::vllm        ? "vLLM"
                         : o == ServeEngine::sglang    ? "SGLang"
                         : o == ServeEngine::llama_cpp ? "llama.cpp"
                                                       : "hf");
      }
      // "vLLM", "vLLM and hf", "vLLM, SGLang and hf".
      std::string words(owners.back());
      if (owners.size() > 1) {
        words = fmt::format("{} and {}", fmt::join(owners.begin(), owners.end() - 1, ", "),
                            owners.back());
      }
      CHECK(r.err == fmt::format("memest: error: {}: a {} flag, not used by --engine {}\n", f.flag,
                                 words, serve_engine_name(e)));
      ++refused;
    }
  }
  CHECK(refused >= 40);
  // The words name each engine of the row.
  const auto refusal = [](std::vector<std::string> args) {
    args.insert(args.begin(), {"serve", "--model", "llama-3.1-8b"});
    return run_cli(args).err;
  };
  CHECK(refusal({"--engine", "llama.cpp", "--dtype", "auto"}) ==
        "memest: error: --dtype: a vLLM, SGLang and hf flag, not used by --engine llama.cpp\n");
  CHECK(refusal({"--engine", "hf", "--max-model-len", "8"}) ==
        "memest: error: --max-model-len: a vLLM flag, not used by --engine hf\n");
  CHECK(refusal({"--max-new-tokens", "8"}) ==
        "memest: error: --max-new-tokens: a hf flag, not used by --engine vllm\n");
}
