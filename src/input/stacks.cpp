// --stack: what a training stack does unless told otherwise, laid under the run's own flags and
// file, so that anything the user gives overrides it.
#include "input/stacks.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

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
  const auto present = [&](const RunOptionInfo& info) {
    return info.text ? (given_options.*info.text).has_value()
                     : (given_options.*info.boolean).has_value();
  };
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty() || !present(info)) continue;
    const RunOptionInfo& of = run_option(info.alias_of);
    if (of.text) (base.*of.text).reset();
  }
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty() || !present(run_option(info.alias_of))) continue;
    if (info.text) (base.*info.text).reset();
    if (info.boolean) (base.*info.boolean).reset();
  }
}

}  // namespace

RunOptions with_stack(const RunOptions& options) {
  if (!options.stack) return options;
  const StackPreset& stack = stack_named(*options.stack);
  RunOptions base;
  for (const auto& d : stack.defaults) {
    if (!d.needs.empty() && !given(options, run_option(d.needs))) continue;
    const RunOptionInfo& info = run_option(d.flag);
    const std::string where = fmt::format("{} {} ({})", options.stack->where, stack.name, d.flag);
    if (info.text) base.*info.text = Setting<std::string>{std::string(d.value), where};
    if (info.boolean) base.*info.boolean = Setting<bool>{d.value == "on", where};
  }
  drop_spellings_of(options, base);
  merge(base, options);
  return base;
}

}  // namespace memest
