#pragma once
// Run config files: the JSON form of RunOptions, read and written. This layer sits on config (the
// option table and resolve()); config never calls back into it.

#include <memest/config.hpp>

#include <string>
#include <string_view>

namespace memest {

/// Parses a run config (JSON, comments allowed). Checks keys and JSON types; values are checked
/// by resolve(). A relative `model.config` path is taken relative to the file. Throws Error
/// with one line per problem, each `<source>: <pointer>: <problem>`, all problems at once.
RunOptions parse_run_config(std::string_view json_text, const std::string& source);

/// Reads and parses a run config file; `<path>: cannot open file: <reason>` if it is missing, a
/// directory or unreadable.
RunOptions load_run_config(const std::string& path);

/// The run config that reproduces the run `options` describe, as JSON text: every option that
/// applies to it (run_option_rules), given or by its default, after the stack's defaults; an
/// older or shorter spelling (--amp, --layer-clones) written as the option it names, paths
/// absolute, an inline architecture as its object. `memest --file` of it gives the same
/// estimate; the JSON document echoes it as `inputs`.
std::string run_config_of(const RunOptions& options);

/// The JSON Schema (draft 2020-12) of run config files, generated from run_option_table(); it is
/// shipped as configs/schema/run.schema.json for editors.
std::string run_config_schema();

}  // namespace memest
