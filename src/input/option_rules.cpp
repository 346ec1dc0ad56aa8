// The rules between run options, as data: what an option needs and what it conflicts with, each
// with its message, in the order resolve() checks them (the first rule a run breaks in a check is
// what it is told, so the order is part of the output). A new option's rule is one line here.
#include <memest/error.hpp>
#include <memest/run_options.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {
namespace {

constexpr std::string_view kNeeds = "{where} needs {other}";
constexpr std::string_view kNeedsValue = "{where} {value} needs {other}";
constexpr std::string_view kOptimizerOnly =
    "{where}: applies only to optimizer {values}, got optimizer \"{other_value}\"";
constexpr std::string_view kShortFor =
    "{where} conflicts with {other} \"{other_value}\" ({where} is short for {short_for})";
constexpr std::string_view kFsdpValued =
    "{where} \"{value}\": applies to FSDP (expected --fsdp MODE as well)";
constexpr std::string_view kFsdpFlag = "{where}: applies to FSDP (expected --fsdp MODE as well)";
constexpr std::string_view kBothSizes =
    "{where} needs {other_named} as well (activations depend on both)";
constexpr std::string_view kTwoWays =
    "{where}: conflicts with {other} (two ways of loading the model; give one)";
constexpr std::string_view kTwoWaysValued =
    "{where} {value}: conflicts with {other} (two ways of loading the model; give one)";
constexpr std::string_view kLoadingAlias =
    "{where} \"{value}\" conflicts with {other} (both say how the model is loaded; give one)";

const std::vector<std::string_view> kQuantisedLoading = {
    "nf4-whole", "nf4-chunked", "layer-clones,nf4-whole", "layer-clones,nf4-chunked"};

// data table: one row per rule, in the order the messages print
std::vector<OptionRule> build_rules() {
  using C = Check;
  const auto needs = RuleKind::needs;
  const auto conflicts = RuleKind::conflicts;
  return {
      // QLoRA and LoRA settings without adapters: valued options first, as they read.
      {C::lora, "--lora-targets", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora, "--lora-dropout", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora, "--adapter-dtype", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora, "--qlora-init", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora,
       "--model-loading",
       kQuantisedLoading,
       needs,
       {"--lora-rank"},
       {},
       false,
       kNeedsValue},
      {C::lora, "--qlora", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora, "--double-quant", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::lora, "--qlora-keeps-input", {}, needs, {"--lora-rank"}, {}, false, kNeeds},
      {C::qlora, "--double-quant", {}, needs, {"--qlora"}, {}, false, kNeeds},
      {C::qlora, "--qlora-keeps-input", {}, needs, {"--qlora"}, {}, false, kNeeds},
      {C::qlora, "--qlora-init", {}, needs, {"--qlora"}, {}, false, kNeeds},
      {C::qlora, "--model-loading", kQuantisedLoading, needs, {"--qlora"}, {}, false, kNeedsValue},
      // An optimizer's own options, even when given as false.
      {C::optimizer,
       "--nesterov",
       {},
       needs,
       {"--optimizer"},
       {"sgd-momentum"},
       true,
       kOptimizerOnly},
      {C::optimizer,
       "--amsgrad",
       {},
       needs,
       {"--optimizer"},
       {"adam", "adamw"},
       true,
       kOptimizerOnly},
      {C::optimizer,
       "--rmsprop-momentum",
       {},
       needs,
       {"--optimizer"},
       {"rmsprop"},
       true,
       kOptimizerOnly},
      {C::optimizer, "--centered", {}, needs, {"--optimizer"}, {"rmsprop"}, true, kOptimizerOnly},
      {C::optimizer,
       "--first-moment",
       {},
       needs,
       {"--optimizer"},
       {"adafactor"},
       true,
       kOptimizerOnly},
      {C::optimizer_impl,
       "--fused-optimizer",
       {},
       conflicts,
       {"--optimizer-impl"},
       {"fused"},
       false,
       kShortFor},
      {C::precision, "--amp", {}, conflicts, {"--precision"}, {"amp"}, false, kShortFor},
      {C::loss,
       "--loss-chunk",
       {},
       needs,
       {"--loss"},
       {"chunked", "chunked-tokens"},
       false,
       "{where} needs --loss chunked or chunked-tokens"},
      {C::sizes, "--batch", {}, needs, {"--seq"}, {}, false, kBothSizes},
      {C::sizes, "--seq", {}, needs, {"--batch"}, {}, false, kBothSizes},
      // FSDP's settings without --fsdp: valued options first.
      // A token dispatcher's routing: what a rank's experts receive. Only Megatron-LM's drop
      // what passes a capacity (torchtitan's standard dispatcher is dropless).
      {C::moe,
       "--moe-routing",
       {},
       needs,
       {"--moe-dispatcher"},
       {"alltoall", "allgather", "torchtitan"},
       false,
       "{where} applies to --moe-dispatcher alltoall, allgather or torchtitan"},
      {C::moe,
       "--moe-capacity-factor",
       {},
       needs,
       {"--moe-dispatcher"},
       {"alltoall", "allgather"},
       false,
       "{where} applies to --moe-dispatcher alltoall or allgather"},
      {C::moe,
       "--moe-capacity-factor",
       {},
       conflicts,
       {"--moe-routing"},
       {},
       false,
       "{where} \"{value}\" conflicts with {other} \"{other_value}\" (a capacity factor drops "
       "what passes it; routing applies to dropless runs)"},
      {C::fsdp, "--fsdp-version", {}, needs, {"--fsdp"}, {}, false, kFsdpValued},
      {C::fsdp, "--fsdp-group", {}, needs, {"--fsdp"}, {}, false, kFsdpValued},
      {C::fsdp, "--fsdp-param-dtype", {}, needs, {"--fsdp"}, {}, false, kFsdpValued},
      {C::fsdp, "--fsdp-reduce-dtype", {}, needs, {"--fsdp"}, {}, false, kFsdpValued},
      {C::fsdp, "--fsdp-orig-params", {}, needs, {"--fsdp"}, {}, false, kFsdpFlag},
      {C::fsdp, "--fsdp-sync-module-states", {}, needs, {"--fsdp"}, {}, false, kFsdpFlag},
      {C::fsdp, "--fsdp-no-sync", {}, needs, {"--fsdp"}, {}, false, kFsdpFlag},
      {C::fsdp,
       "--model-loading",
       {"fsdp-sync"},
       needs,
       {"--fsdp"},
       {},
       false,
       "{where} {value}: applies to FSDP (expected --fsdp MODE as well)"},
      {C::fsdp_mode,
       "--fsdp",
       {"hybrid"},
       needs,
       {"--fsdp-group"},
       {},
       false,
       "{where} hybrid: give --fsdp-group N, the ranks one replica is sharded over (a node, e.g. "
       "8)"},
      {C::fsdp_mode,
       "--fsdp-group",
       {},
       needs,
       {"--fsdp"},
       {"hybrid"},
       false,
       "{where} \"{value}\": a shard group applies to --fsdp hybrid, not \"{other_value}\""},
      {C::fsdp1,
       "--fsdp-orig-params",
       {},
       needs,
       {"--fsdp-version"},
       {"1"},
       false,
       "{where}: use_orig_params is FSDP1's (expected --fsdp-version 1)"},
      {C::fsdp1,
       "--fsdp-sync-module-states",
       {},
       needs,
       {"--fsdp-version"},
       {"1"},
       false,
       "{where}: sync_module_states is FSDP1's (expected --fsdp-version 1)"},
      {C::fsdp1,
       "--model-loading",
       {"fsdp-sync"},
       needs,
       {"--fsdp-version"},
       {"1"},
       false,
       "{where} {value}: sync_module_states is FSDP1's (expected --fsdp-version 1)"},
      {C::budget,
       "--gpu",
       {},
       conflicts,
       {"--budget"},
       {},
       false,
       "{where} \"{value}\" conflicts with {other} \"{other_value}\" (give a GPU or a budget)"},
      // Both would count the CUDA context: --reserve takes it from the budget, --context-reserve
      // adds it to the need.
      {C::budget,
       "--reserve",
       {},
       conflicts,
       {"--context-reserve"},
       {},
       false,
       "{where} \"{value}\" conflicts with {other} \"{other_value}\" (both count the CUDA "
       "context: {where} takes it from the budget, {other} adds it to the need; give one)"},
      {C::reserve,
       "--reserve",
       {},
       needs,
       {"--gpu", "--budget"},
       {},
       false,
       "{where} needs --gpu or --budget (a reserve is taken from a device's memory)"},
      // The ways a model reaches the device exclude each other, but torchtune's builders
      // quantise (--qlora-init) and clone layers (--layer-clones) together.
      {C::loading,
       "--qlora-init",
       {"whole", "chunked"},
       conflicts,
       {"--fsdp-sync-module-states"},
       {},
       false,
       kTwoWaysValued},
      {C::loading,
       "--qlora-init",
       {"whole", "chunked"},
       conflicts,
       {"--load-full"},
       {},
       false,
       kTwoWaysValued},
      {C::loading,
       "--layer-clones",
       {},
       conflicts,
       {"--fsdp-sync-module-states"},
       {},
       false,
       kTwoWays},
      {C::loading, "--layer-clones", {}, conflicts, {"--load-full"}, {}, false, kTwoWays},
      {C::loading,
       "--fsdp-sync-module-states",
       {},
       conflicts,
       {"--load-full"},
       {},
       false,
       kTwoWays},
      {C::loading,
       "--model-loading",
       {},
       conflicts,
       {"--qlora-init", "--layer-clones", "--fsdp-sync-module-states", "--load-full"},
       {},
       false,
       kLoadingAlias},
      // Versions decide a stack's defaults; without a stack they would be silently unused.
      {C::loading,
       "--versions",
       {},
       needs,
       {"--stack"},
       {},
       false,
       "{where} needs --stack (the versions decide which of a stack's defaults apply)"},
  };
}

bool has(const std::vector<std::string_view>& names, std::string_view v) {
  return std::find(names.begin(), names.end(), v) != names.end();
}

// Whether the rule restricts the run's value of its option: given (a flag on, or given at all
// when `even_off`) with one of the rule's values.
bool restricts(const RunOptions& o, const RunOptionInfo& self, const OptionRule& r) {
  if (self.boolean) {
    const auto& s = o.*self.boolean;
    return s && (s->value || r.even_off);
  }
  const auto& s = o.*self.text;
  return s && (r.when.empty() || has(r.when, s->value));
}

// The other option that decides the rule: for `needs`, the first that satisfies it (or the
// first named); for `conflicts`, the first given that conflicts; nullptr when the rule holds.
const RunOptionInfo* breaking_other(const RunOptions& o, const OptionRule& r) {
  for (const auto other_flag : r.others) {
    const RunOptionInfo& other = run_option(other_flag);
    const auto v = effective_value(o, other);
    const bool value_ok = r.values.empty() || (v && has(r.values, *v));
    if (r.kind == RuleKind::needs) {
      if (r.values.empty() ? given(o, other) : value_ok) return nullptr;
    } else if (given(o, other) && !(r.values.empty() ? false : value_ok)) {
      return &other;
    }
  }
  return r.kind == RuleKind::needs ? &run_option(r.others.front()) : nullptr;
}

std::string message(const RunOptions& o, const RunOptionInfo& self, const OptionRule& r,
                    const RunOptionInfo& other) {
  std::string where, value;
  if (self.text) {
    where = (o.*self.text)->where;
    value = (o.*self.text)->value;
  } else {
    where = (o.*self.boolean)->where;
  }
  const bool other_given = stated(o, other);
  const std::string other_where =
      other_given ? (other.text ? (o.*other.text)->where : (o.*other.boolean)->where) : other.flag;
  const std::string other_named =
      where.starts_with("--") ? other.flag : fmt::format("/{}/{}", other.section, other.key);
  const std::string short_for =
      r.values.empty() ? "" : fmt::format("{} {}", other.flag, r.values.front());
  return fmt::format(fmt::runtime(r.message), fmt::arg("where", where), fmt::arg("value", value),
                     fmt::arg("other", other_where),
                     fmt::arg("other_value", effective_value(o, other).value_or("")),
                     fmt::arg("other_named", other_named),
                     fmt::arg("values", fmt::join(r.values, " or ")),
                     fmt::arg("short_for", short_for));
}

}  // namespace

const std::vector<OptionRule>& run_option_rules() {
  static const std::vector<OptionRule> rules = build_rules();
  return rules;
}

std::vector<const OptionRule*> rules_of(std::string_view flag) {
  std::vector<const OptionRule*> out;
  for (const auto& r : run_option_rules()) {
    if (r.option == flag) out.push_back(&r);
  }
  return out;
}

std::optional<std::string> broken_rule(const RunOptions& o, Check check) {
  for (const auto& r : run_option_rules()) {
    if (r.check != check) continue;
    const RunOptionInfo& self = run_option(r.option);
    if (!restricts(o, self, r)) continue;
    if (const RunOptionInfo* other = breaking_other(o, r)) return message(o, self, r, *other);
  }
  return std::nullopt;
}

void check_rules(const RunOptions& o, Check check) {
  if (auto m = broken_rule(o, check)) throw Error(*m);
}

bool applies(const RunOptions& o, const RunOptionInfo& info) {
  const auto value = effective_value(o, info);
  for (const OptionRule* r : rules_of(info.flag)) {
    if (!r->when.empty() && !(value && has(r->when, *value))) continue;
    if (breaking_other(o, *r)) return false;
  }
  return true;
}

}  // namespace memest
