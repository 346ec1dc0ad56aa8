#pragma once
// Serve run configs (docs/serving.md): a JSON object whose keys are the serve flags without
// their dashes, '-' as '_' ({"engine": "llama.cpp", "ctx_size": 8192, "flash_attn": true}), read
// by `memest serve --file run.json` (flags override it), and their JSON Schema (`memest schema
// --serve`, configs/schema/serve.schema.json), both generated from serve_options.hpp's table.

#include <memest/serve_options.hpp>

#include <string>

namespace memest {

/// The values of the serve run config at `path`, by flag, each `where` "<path>: /<key>"; a path
/// value relative to the file's folder; a switch given false is left out. Throws Error
/// `<path>: /<key>: ...` on the first problem (an unknown key with the closest one, a value of
/// the wrong JSON type).
ServeValues load_serve_config(const std::string& path);

/// The serve run config that gives `given` again (the JSON output's `inputs`): each value under
/// its key, a switch as true, a number where the option takes one, a path made absolute, and
/// the engine always. `memest serve --file` of it gives the same estimate.
std::string serve_config_of(const ServeValues& given);

/// The JSON Schema (draft 2020-12) of serve run configs: every choice an enum of the engine's
/// names, and each engine's keys refused under the other engine.
std::string serve_config_schema();

}  // namespace memest
