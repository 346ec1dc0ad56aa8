// memest --from: JSON files (DeepSpeed configs, TrainingArguments JSON) flattened; parsed by
// json_access, as every JSON file memest reads.
#include "input/from_tree.hpp"
#include "input/json_access.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {
namespace {

std::string json_leaf_text(const detail::Json& j) {
  return j.is_string() ? j.get<std::string>() : j.dump();
}

void flatten_json(const detail::Json& j, const std::string& path, FromTree& tree) {
  const auto child = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) flatten_json(value, child(key), tree);
    return;
  }
  if (path.empty()) throw Error(fmt::format("{}: expected a JSON object", tree.source));
  FromValue v{path, "", j.is_null(), false, {}, fmt::format("{}: {}", tree.source, path)};
  if (j.is_array()) {
    const bool scalars = std::all_of(j.begin(), j.end(), [](const detail::Json& item) {
      return !item.is_object() && !item.is_array();
    });
    if (!scalars) {
      for (std::size_t i = 0; i < j.size(); ++i) flatten_json(j[i], child(std::to_string(i)), tree);
      return;
    }
    v.list = true;
    for (const auto& item : j) v.items.push_back(json_leaf_text(item));
  } else if (!j.is_null()) {
    v.text = json_leaf_text(j);
  }
  tree.values.push_back(std::move(v));
}

}  // namespace

FromTree read_json_tree(std::string_view text, const std::string& source) {
  FromTree tree{source, {}};
  flatten_json(detail::parse_json(text, source), "", tree);
  return tree;
}

}  // namespace memest
