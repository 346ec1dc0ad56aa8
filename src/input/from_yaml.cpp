// memest --from: YAML files (torchtune recipes, LitGPT configs, Megatron-LM's model_config.yaml)
// flattened with Debian's yaml-cpp. Built without MEMEST_FROM (the web page), it says so.
#include "input/from_tree.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#if MEMEST_FROM
#include <yaml-cpp/yaml.h>
#endif

namespace memest {

#if MEMEST_FROM
namespace {

// Deeper than any framework's config: a fuzzer's nesting stops here, not at the stack's end.
constexpr int kMaxYamlDepth = 64;

std::string yaml_where(const FromTree& tree, const std::string& path) {
  return fmt::format("{}: {}", tree.source, path.empty() ? "(top level)" : path);
}

void flatten_yaml(const YAML::Node& node, const std::string& path, int depth, FromTree& tree) {
  if (depth > kMaxYamlDepth)
    throw Error(
        fmt::format("{}: nested deeper than {} levels", yaml_where(tree, path), kMaxYamlDepth));
  const auto child = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
  if (node.IsMap()) {
    if (node.size() == 0 && !path.empty())
      tree.values.push_back({path, "", false, false, {}, yaml_where(tree, path)});
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        throw Error(fmt::format("{}: a key that is not a name", yaml_where(tree, path)));
      flatten_yaml(kv.second, child(kv.first.Scalar()), depth + 1, tree);
    }
    return;
  }
  if (path.empty()) throw Error(fmt::format("{}: expected a mapping of keys", tree.source));
  FromValue v{path, "", node.IsNull(), false, {}, yaml_where(tree, path)};
  if (node.IsScalar()) {
    v.text = node.Scalar();
  } else if (node.IsSequence()) {
    bool scalars = true;
    for (const auto& item : node) scalars = scalars && (item.IsScalar() || item.IsNull());
    if (!scalars) {
      std::size_t i = 0;
      for (const auto& item : node) flatten_yaml(item, child(std::to_string(i++)), depth + 1, tree);
      return;
    }
    v.list = true;
    for (const auto& item : node) v.items.push_back(item.IsNull() ? "" : item.Scalar());
  }
  tree.values.push_back(std::move(v));
}

}  // namespace

FromTree read_yaml_tree(std::string_view text, const std::string& source) {
  FromTree tree{source, {}};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}: invalid YAML: {} at line {}, column {}", source, e.msg,
                            e.mark.line + 1, e.mark.column + 1));
  }
  if (root.IsNull()) return tree;
  try {
    flatten_yaml(root, "", 0, tree);
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}: invalid YAML: {}", source, e.msg));
  }
  return tree;
}

#else

FromTree read_yaml_tree(std::string_view, const std::string& source) {
  throw Error(fmt::format(
      "{}: this memest was built without YAML files for --from (CMake option MEMEST_FROM)",
      source));
}

#endif

}  // namespace memest
