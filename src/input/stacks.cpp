// --stack: what a training stack does unless told otherwise, laid under the run's own flags and
// file, so that anything the user gives overrides it. A default that changed over a package's
// releases holds for the versions --versions gives (a package not given: its newest).
#include "input/stacks.hpp"

#include "input/versions.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace memest {
namespace {

const StackPreset& stack_named(const Setting<std::string>& s) {
  for (const auto& p : stack_presets())
    if (p.name == s.value) return p;
  throw Error(fmt::format("{}: unknown stack \"{}\" (expected one of: {})", s.where, s.value,
                          fmt::join(stack_names(), ", ")));
}

// An option the user gave replaces the stack's value of every option that is another spelling
// of it (--amp of --precision, --fused-optimizer of --optimizer-impl, --qlora-init of
// --model-loading), and the reverse: a short flag does not conflict with the stack's default.
void drop_spellings_of(const RunOptions& given_options, RunOptions& base) {
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty() || !stated(given_options, info)) continue;
    const RunOptionInfo& of = run_option(info.alias_of);
    if (of.text) (base.*of.text).reset();
  }
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty() || !stated(given_options, run_option(info.alias_of))) continue;
    if (info.text) (base.*info.text).reset();
    if (info.boolean) (base.*info.boolean).reset();
  }
}

void set_default(RunOptions& o, const StackDefault& d, const std::string& where) {
  const RunOptionInfo& info = run_option(d.flag);
  if (info.text) o.*info.text = Setting<std::string>{std::string(d.value), where};
  if (info.boolean) o.*info.boolean = Setting<bool>{d.value == "on", where};
}

std::string lowercase(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Versions versions_of(const RunOptions& o) {
  return o.versions ? parse_versions(o.versions->value, o.versions->where) : Versions{};
}

// Whether the run's package version lies in `range`; a package not given is at its newest.
bool in_range(const VersionRange& range, const Versions& versions) {
  if (range.package.empty()) return true;
  const auto it = versions.find(range.package);
  if (it == versions.end()) return range.below.empty();
  const Version v = *parse_version(it->second);
  if (!range.from.empty() && v < *parse_version(range.from)) return false;
  return range.below.empty() || v < *parse_version(range.below);
}

// Whether the run gives every option of `needs` ("--fsdp,--grad-accum").
bool gives_all(const RunOptions& options, std::string_view needs) {
  while (!needs.empty()) {
    const auto comma = needs.find(',');
    const RunOptionInfo& info = run_option(needs.substr(0, comma));
    if (!given(options, info)) return false;
    // A count whose default is 1 (--grad-accum, --dp) given as 1 is as if not given.
    if (info.kind == ValueKind::count && info.fallback.value == "1" &&
        (options.*info.text)->value == "1")
      return false;
    needs = comma == std::string_view::npos ? std::string_view() : needs.substr(comma + 1);
  }
  return true;
}

// Whether the default breaks none of the rules between options (option_rules.cpp) with the run's
// own: use_orig_params is FSDP1's, so LitGPT's does not meet --fsdp-version 2, and the stack's
// way of loading the model gives way to the run's.
bool keeps_rules(const StackDefault& d, const RunOptions& options) {
  RunOptions probe = options;
  set_default(probe, d, "");
  return applies(probe, run_option(d.flag));
}

// Whether the run's model has routed experts: a --model (a preset, its Hub id, the local Hugging
// Face cache), --architecture or --config read as resolve() reads them; a bare --params is the
// canonical dense decoder. A model that does not load is refused by resolve(), not here.
bool has_routed_experts(const RunOptions& o) {
  try {
    ModelSpec m;
    if (o.model) {
      m = load_named_model(o.model->value, hf_hub_cache([](const char* var) -> const char* {
                             return std::getenv(var);
                           }));
    } else if (o.architecture) {
      m = parse_hf_config(o.architecture->value, o.architecture->where);
    } else if (o.config) {
      m = load_hf_config(o.config->value);
    }
    return m.arch && m.arch->num_experts > 0;
  } catch (const Error&) {
    return false;
  }
}

bool holds(const StackDefault& d, const RunOptions& options, const Versions& versions) {
  if (!gives_all(options, d.needs) || !keeps_rules(d, options)) return false;
  if (!d.model.empty() &&
      !(options.model && lowercase(options.model->value).find(d.model) != std::string::npos))
    return false;
  if (!in_range(d.versions, versions)) return false;
  return !d.routed_experts || has_routed_experts(options);
}

// The defaults of the run's stack that hold for it, in the stack's order.
std::vector<const StackDefault*> defaults_holding(const RunOptions& options,
                                                  const StackPreset& stack) {
  const Versions versions = versions_of(options);
  std::vector<const StackDefault*> out;
  for (const auto& d : stack.defaults)
    if (holds(d, options, versions)) out.push_back(&d);
  return out;
}

// "torch 1.10 (below 1.11)", or "torch not in --versions, so its newest release".
std::string version_said(const VersionRange& range, const Versions& versions) {
  const auto it = versions.find(range.package);
  if (it == versions.end())
    return fmt::format("{} not in --versions, so its newest release", range.package);
  if (range.below.empty())
    return fmt::format("{} {} (from {})", range.package, it->second, range.from);
  return fmt::format("{} {} (below {})", range.package, it->second, range.below);
}

// The --model-loading item a default spelled with an older flag stands for ("--qlora-init
// whole": nf4-whole), as --model-loading names it.
std::string loading_item(const StackDefault& d) {
  if (d.flag == "--qlora-init") return fmt::format("nf4-{}", d.value);
  if (d.flag == "--layer-clones") return "layer-clones";
  if (d.flag == "--fsdp-sync-module-states") return "fsdp-sync";
  if (d.flag == "--load-full") return "full";
  return std::string(d.value);
}

bool lists_item(std::string_view list, std::string_view item) {
  while (true) {
    const auto comma = list.find(',');
    if (list.substr(0, comma) == item) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}

// Whether the run took default `d`: the stack's setting survived the run's own options (in
// `merged`), or the run gives the same value itself (a run config written from a run states
// every default it took, and reads back with the same assumptions).
bool in_effect(const RunOptions& options, const RunOptions& merged, const StackDefault& d,
               const StackPreset& stack) {
  const RunOptionInfo& info = run_option(d.flag);
  const std::string where = fmt::format("{} {} ({})", options.stack->where, stack.name, d.flag);
  if (info.text && merged.*info.text && (merged.*info.text)->where == where) return true;
  if (info.boolean && merged.*info.boolean && (merged.*info.boolean)->where == where) return true;
  if (stated(options, info))
    return effective_value(options, info) ==
           (info.boolean ? (d.value == "on" ? "true" : "false") : std::string(d.value));
  if (info.alias_of == "--model-loading" && options.model_loading)
    return lists_item(options.model_loading->value, loading_item(d));
  // The two short flags that stand for a value (run_config.cpp writes them as that value).
  if (d.flag == "--optimizer-impl" && options.fused_optimizer && options.fused_optimizer->value)
    return d.value == "fused";
  if (d.flag == "--precision" && options.amp && options.amp->value) return d.value == "amp";
  return false;
}

}  // namespace

RunOptions with_stack(const RunOptions& options) {
  if (!options.stack) return options;
  const StackPreset& stack = stack_named(*options.stack);
  RunOptions base;
  for (const StackDefault* d : defaults_holding(options, stack))
    set_default(base, *d, fmt::format("{} {} ({})", options.stack->where, stack.name, d->flag));
  drop_spellings_of(options, base);
  merge(base, options);
  return base;
}

std::vector<std::string> stack_assumptions(const RunOptions& options) {
  std::vector<std::string> out;
  if (!options.stack) return out;
  const StackPreset& stack = stack_named(*options.stack);
  const Versions versions = versions_of(options);
  const RunOptions merged = with_stack(options);
  for (const StackDefault* d : defaults_holding(options, stack)) {
    const bool decided = !d->versions.package.empty() || d->routed_experts;
    if (!decided || !in_effect(options, merged, *d, stack)) continue;
    const std::string value = d->value == "on" ? "" : fmt::format(" {}", d->value);
    const std::string why = d->routed_experts ? std::string("the model has routed experts")
                                              : version_said(d->versions, versions);
    out.push_back(
        fmt::format("{}{} (--stack {}, {}): {}", d->flag, value, stack.name, why, d->source));
  }
  return out;
}

}  // namespace memest
