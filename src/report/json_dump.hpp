#pragma once
// Private: JSON output text for the renderers. Text that came from the command line (a file name,
// a model name taken from a path) need not be UTF-8; nlohmann's dump() throws on such bytes, so
// each is written as U+FFFD instead of failing the whole report.

#include <nlohmann/json.hpp>

#include <string>

namespace memest::detail {

/// `j` as JSON text, `indent` spaces per level (-1: one line), invalid UTF-8 replaced.
inline std::string dump_json(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace memest::detail
