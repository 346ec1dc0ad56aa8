#pragma once
// --stack: a training stack's defaults (stack_presets.hpp) laid under the run's own options.

#include "input/stack_presets.hpp"

#include <memest/run_options.hpp>

#include <string>
#include <vector>

namespace memest {

/// `options` with the defaults of the stack it names (if any) laid under it. An unknown stack
/// throws Error naming the setting's `where`.
RunOptions with_stack(const RunOptions& options);

/// One line for each default of the run's stack that a package version or the model's routed
/// experts decided and that the run does not override with another value: the option, the stack,
/// the version (or that it was not given, so the newest) and the source ("--softmax-keeps-input
/// (--stack hf, torch 1.10 (below 1.11)): ...").
std::vector<std::string> stack_assumptions(const RunOptions& options);

}  // namespace memest
