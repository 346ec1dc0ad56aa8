#pragma once
// Training-stack presets as data: what each stack does by default, as the flags a user would
// type. Applying them to a run is stacks.hpp's with_stack(); this file needs no option table, so
// the table can list the stacks' names.

#include <span>
#include <string_view>
#include <vector>

namespace memest {

/// The versions of one package a default holds for, [from, below); an empty bound is open. A
/// package the run's --versions does not name is at its newest release, so a default with a
/// `below` bound does not hold for it.
struct VersionRange {
  std::string_view package;  ///< "torch"; empty: every version
  std::string_view from;     ///< "2.0": this version and later
  std::string_view below;    ///< "1.11": the versions before this one
};

/// One default a training stack applies, as the flag a user would type, with where in that
/// project's code the default is set (docs/stacks.md quotes each line).
struct StackDefault {
  std::string_view flag;    ///< "--attention"
  std::string_view value;   ///< "sdpa"; "on" for an on/off flag
  std::string_view source;  ///< "torchtune recipes/configs/... @1814feb17"
  /// Applied only when the run gives these options ("--lora-rank"; "--fsdp,--grad-accum"), a
  /// count whose default is 1 as more than 1. A default that would break a rule between options
  /// (option_rules.cpp) with the run's own is not applied either.
  std::string_view needs;
  VersionRange versions{};      ///< applied only for these versions of a package
  std::string_view model{};     ///< applied only to a --model whose name has this in it ("llama-2")
  bool routed_experts = false;  ///< applied only to a model with routed experts (MoE)
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
std::span<const std::string_view> stack_names();

}  // namespace memest
