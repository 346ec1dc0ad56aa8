// memest --from: TOML files (torchtitan's train configs) flattened with Debian's toml++, used
// header-only. Built without MEMEST_FROM (the web page), it says so.
#include "input/from_tree.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#if MEMEST_FROM
#include <sstream>
#include <toml++/toml.h>
#endif

namespace memest {

#if MEMEST_FROM
namespace {

constexpr int kMaxTomlDepth = 64;

// A scalar as its TOML text would read: 8192, 3e-4, true, "op" without its quotes.
std::string toml_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  std::ostringstream out;  // dates and times
  if (const auto* d = node.as_date()) out << *d;
  if (const auto* t = node.as_time()) out << *t;
  if (const auto* dt = node.as_date_time()) out << *dt;
  return out.str();
}

void flatten_toml(const toml::node& node, const std::string& path, int depth, FromTree& tree) {
  const std::string where = fmt::format("{}: {}", tree.source, path);
  if (depth > kMaxTomlDepth)
    throw Error(fmt::format("{}: nested deeper than {} levels", where, kMaxTomlDepth));
  const auto child = [&](std::string_view key) {
    return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
  };
  if (const auto* table = node.as_table()) {
    for (const auto& [key, value] : *table) flatten_toml(value, child(key.str()), depth + 1, tree);
    return;
  }
  FromValue v{path, "", false, false, {}, where};
  if (const auto* array = node.as_array()) {
    v.list = true;
    for (const auto& item : *array) {
      if (item.is_table() || item.is_array()) {
        v.list = false;
        std::size_t i = 0;
        for (const auto& each : *array)
          flatten_toml(each, child(std::to_string(i++)), depth + 1, tree);
        return;
      }
      v.items.push_back(toml_text(item));
    }
  } else {
    v.text = toml_text(node);
  }
  tree.values.push_back(std::move(v));
}

}  // namespace

FromTree read_toml_tree(std::string_view text, const std::string& source) {
  FromTree tree{source, {}};
  try {
    const toml::table root = toml::parse(text, source);
    flatten_toml(root, "", 0, tree);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}: invalid TOML: {} at line {}, column {}", source, e.description(),
                            e.source().begin.line, e.source().begin.column));
  }
  return tree;
}

#else

FromTree read_toml_tree(std::string_view, const std::string& source) {
  throw Error(fmt::format(
      "{}: this memest was built without TOML files for --from (CMake option MEMEST_FROM)",
      source));
}

#endif

}  // namespace memest
