#pragma once
// --stack: a training stack's defaults (stack_presets.hpp) laid under the run's own options.

#include "input/stack_presets.hpp"

#include <memest/run_options.hpp>

namespace memest {

/// `options` with the defaults of the stack it names (if any) laid under it. An unknown stack
/// throws Error naming the setting's `where`.
RunOptions with_stack(const RunOptions& options);

}  // namespace memest
