// The run option table and its rules: each row's kind, names and default agree with each other
// and with its help; every rule names options that exist; a broken rule says what it says.
#include "testutil.hpp"

#include <memest/config.hpp>
#include <memest/error.hpp>
#include <memest/run_options.hpp>

#include <algorithm>
#include <regex>
#include <set>

using namespace memest;

namespace {

bool is_one_of(std::span<const std::string_view> names, std::string_view v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

bool whole_number(std::string_view v) {
  return !v.empty() && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
}

RunOptions options_of(std::vector<std::pair<std::string, std::string>> settings) {
  RunOptions o;
  for (const auto& [flag, value] : settings) {
    const RunOptionInfo& info = run_option(flag);
    const std::string where = "t.json: /" + info.section + "/" + info.key;
    if (info.boolean) o.*info.boolean = Setting<bool>{value == "true", where};
    if (info.text) o.*info.text = Setting<std::string>{value, where};
  }
  return o;
}

}  // namespace

TEST_CASE("every flag has one key, every row's kind, names and default agree", "[run_options]") {
  std::set<std::string> flags, keys;
  for (const auto& info : run_option_table()) {
    CAPTURE(info.flag);
    REQUIRE(info.flag.starts_with("--"));
    REQUIRE((info.text == nullptr) != (info.boolean == nullptr));
    REQUIRE((info.kind == ValueKind::flag) == (info.boolean != nullptr));
    REQUIRE(flags.insert(info.flag).second);
    REQUIRE(keys.insert(info.section + "/" + info.key).second);
    const bool named = info.kind == ValueKind::choice || info.kind == ValueKind::list ||
                       info.kind == ValueKind::name;
    if (named) REQUIRE(info.choices != nullptr);
    if (info.choices) REQUIRE_FALSE(info.choices().empty());
    const std::string_view d = info.fallback.value;
    if (d.empty()) continue;
    REQUIRE(info.fallback.from.empty());  // a constant, or what decides it: not both
    switch (info.kind) {
      case ValueKind::flag:
        CHECK(d == "false");
        break;
      case ValueKind::choice:
        CHECK(is_one_of(info.choices(), d));
        break;
      case ValueKind::count:
        CHECK(whole_number(d));
        CHECK(d != "0");
        break;
      case ValueKind::list:
        // Split by hand: clang with libstdc++ 12 (the asan build) cannot split a string_view.
        for (std::size_t at = 0; at <= d.size();) {
          const std::size_t comma = std::min(d.find(',', at), d.size());
          CHECK((is_one_of(info.choices(), d.substr(at, comma - at)) || is_one_of(info.alone, d)));
          at = comma + 1;
        }
        break;
      default:
        break;
    }
    // A default the help names is the table's ("(default sdpa, as transformers uses)").
    std::smatch m;
    if (std::regex_search(info.help, m, std::regex(R"(\(default ([^;:) ]+))"))) {
      std::string said = m[1].str();
      if (said.ends_with(',')) said.pop_back();
      CHECK(said == d);
    }
  }
  // Every flag has a key (above: one each) and is in --help.
  const auto help = test::run_cli({"--help"});
  for (const auto& f : flags) CHECK_THAT(help.out, Catch::Contains(f));
}

TEST_CASE("every spelling names an option, every rule options that exist", "[run_options]") {
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty()) continue;
    CAPTURE(info.flag);
    CHECK(run_option(info.alias_of).alias_of.empty());
  }
  for (const auto& r : run_option_rules()) {
    CAPTURE(r.option);
    const RunOptionInfo& self = run_option(r.option);
    for (const auto v : r.when) CHECK(is_one_of(self.choices(), v));
    REQUIRE_FALSE(r.others.empty());
    for (const auto other : r.others) {
      const RunOptionInfo& o = run_option(other);
      for (const auto v : r.values) {
        if (o.choices) CHECK(is_one_of(o.choices(), v));
      }
    }
    CHECK_FALSE(r.message.empty());
  }
  CHECK_THROWS_WITH(run_option("--nope"), "no run option --nope");
}

TEST_CASE("a broken rule's message names the option, where it came from and the other",
          "[run_options]") {
  CHECK(broken_rule(options_of({{"--nesterov", "false"}}), Check::optimizer) ==
        "t.json: /optimizer/nesterov: applies only to optimizer sgd-momentum, got optimizer "
        "\"adamw\"");
  // An alias is read as the optimizer it names.
  CHECK_FALSE(broken_rule(options_of({{"--nesterov", "true"}, {"--optimizer", "momentum"}}),
                          Check::optimizer));
  CHECK(broken_rule(options_of({{"--amp", "true"}, {"--precision", "bf16"}}), Check::precision) ==
        "t.json: /precision/amp conflicts with t.json: /precision/preset \"bf16\" (t.json: "
        "/precision/amp is short for --precision amp)");
  CHECK(broken_rule(options_of({{"--batch", "2"}}), Check::sizes) ==
        "t.json: /training/micro_batch needs /training/seq_len as well (activations depend on "
        "both)");
  CHECK(broken_rule(options_of({{"--model-loading", "nf4-whole"}, {"--lora-rank", "8"}}),
                    Check::qlora) == "t.json: /model/loading nf4-whole needs --qlora");
  CHECK(broken_rule(options_of({{"--model-loading", "full"}, {"--layer-clones", "true"}}),
                    Check::loading) ==
        "t.json: /model/loading \"full\" conflicts with t.json: /model/layer_clones (both say how "
        "the model is loaded; give one)");
  CHECK_THROWS_WITH(check_rules(options_of({{"--loss-chunk", "4"}}), Check::loss),
                    "t.json: /training/loss_chunk needs --loss chunked or chunked-tokens");
  CHECK_FALSE(broken_rule(options_of({{"--loss-chunk", "4"}, {"--loss", "chunked"}}), Check::loss));
}

TEST_CASE("an option applies when the rules that restrict it hold", "[run_options]") {
  const RunOptions adamw = options_of({});
  CHECK(applies(adamw, run_option("--amsgrad")));
  CHECK_FALSE(applies(adamw, run_option("--nesterov")));
  CHECK_FALSE(applies(adamw, run_option("--fsdp-version")));
  CHECK_FALSE(applies(adamw, run_option("--lora-targets")));
  CHECK(applies(options_of({{"--lora-rank", "8"}}), run_option("--lora-targets")));
  CHECK_FALSE(applies(options_of({{"--lora-rank", "8"}}), run_option("--double-quant")));
  CHECK(applies(options_of({{"--dp", "2"}, {"--fsdp", "full"}}), run_option("--fsdp-version")));
  CHECK_FALSE(applies(options_of({{"--dp", "2"}, {"--fsdp", "full"}, {"--fsdp-version", "2"}}),
                      run_option("--fsdp-orig-params")));
}

TEST_CASE("an option's value as resolve reads it: given, canonical or its default",
          "[run_options]") {
  CHECK(effective_value(options_of({}), run_option("--optimizer")) == "adamw");
  CHECK(effective_value(options_of({{"--optimizer", "momentum"}}), run_option("--optimizer")) ==
        "sgd-momentum");
  CHECK(effective_value(options_of({}), run_option("--compile")) == "false");
  CHECK_FALSE(effective_value(options_of({}), run_option("--gpu")));
  CHECK(takes_number(run_option("--zero")));
  CHECK(takes_number(run_option("--budget")));
  CHECK_FALSE(takes_number(run_option("--attention")));
}

TEST_CASE("merge lays overrides over a base, a model replacing the base's model", "[run_options]") {
  RunOptions base = options_of({{"--model", "gpt2"}, {"--batch", "2"}});
  merge(base, options_of({{"--params", "7B"}, {"--seq", "64"}}));
  CHECK_FALSE(base.model);
  CHECK(base.params->value == "7B");
  CHECK(base.batch->value == "2");
  CHECK(base.seq->value == "64");
}
