#pragma once
// Private to src/: the JSON Schema of one option's value from its value kind and names
// (src/input/schema.cpp), which both the run configs' schema and the serve run configs' schema
// (src/serve/serve_config.cpp) are built from.

#include <memest/run_options.hpp>

#include <nlohmann/json.hpp>

namespace memest {

/// The schema of a value of `info`'s kind: its JSON types, its pattern, its names as an enum.
nlohmann::ordered_json option_value_schema(const RunOptionInfo& info);

}  // namespace memest
