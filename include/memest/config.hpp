#pragma once
// Resolving the run options (run_options.hpp: what the user asked for, from flags and files) into
// a RunSpec: parsing, loading the model, the stack's defaults and the rules between options.

#include <memest/estimate.hpp>
#include <memest/run_options.hpp>

namespace memest {

/// Validates and turns options into a RunSpec: lays the stack's defaults under them, parses
/// counts and names, loads the model, applies precision overrides, checks the rules between
/// options (run_option_rules). Throws Error naming the setting's `where`, the value and what is
/// accepted, e.g. `--optimizer: unknown optimizer "adamw8" (expected one of: ...)`, one line per
/// problem.
RunSpec resolve(const RunOptions& given);

}  // namespace memest
