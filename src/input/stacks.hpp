#pragma once

#include <memest/config.hpp>

#include <span>
#include <string_view>
#include <vector>

namespace memest {

/// One default a training stack applies, as the flag a user would type, with where in that
/// project's code the default is set (docs/stacks.md quotes each line).
struct StackDefault {
  std::string_view flag;    ///< "--attention"
  std::string_view value;   ///< "sdpa"; "on" for an on/off flag
  std::string_view source;  ///< "torchtune recipes/configs/... @1814feb17"
  std::string_view needs;   ///< applied only when the run gives this option ("--lora-rank")
};

/// What a training stack does unless told otherwise: `--stack NAME` lays these defaults under
/// the run's own flags and file, so that anything the user gives overrides them.
struct StackPreset {
  std::string_view name;     ///< "torchtune"
  std::string_view summary;  ///< one line for --help and docs
  std::span<const StackDefault> defaults;
};

/// Every stack preset, in display order.
std::span<const StackPreset> stack_presets();

/// The stack names, for --help and the schema.
std::vector<std::string_view> stack_names();

/// `options` with the defaults of the stack it names (if any) laid under it. An unknown stack
/// throws Error naming the setting's `where`.
RunOptions with_stack(const RunOptions& options);

}  // namespace memest
