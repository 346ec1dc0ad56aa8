#pragma once
// Run config files: the JSON form of RunOptions. This layer sits on config (the option table and
// resolve()); config never calls back into it.

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

/// The JSON Schema (draft 2020-12) of run config files, generated from run_option_table(); it is
/// shipped as configs/schema/run.schema.json for editors.
std::string run_config_schema();

}  // namespace memest
