#pragma once
// Private to src/input: how the model reaches the device, one concept with one option
// (--model-loading) and the older flags that say parts of it (docs/techniques.md, "Model
// loading").

#include <memest/run_options.hpp>
#include <memest/run_spec.hpp>

namespace memest {

/// The way of loading the model that `o` asks for: its --model-loading, or what the older flags
/// say together (--qlora-init and --layer-clones combine; the rest exclude each other, which
/// check_rules(o, Check::loading) reports). Throws Error naming the setting for a value that is
/// not a name of either.
ModelLoading model_loading_of(const RunOptions& o);

}  // namespace memest
