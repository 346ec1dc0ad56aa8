// memest --from: run options set from a file's keys, with every key accounted for (used,
// ignored because it cannot change memory, or listed as not modelled).
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {

bool key_matches(std::string_view path, std::string_view p) {
  if (p.starts_with("*.")) {
    const std::string_view last = p.substr(2);
    return path == last || (path.ends_with(last) && path[path.size() - last.size() - 1] == '.');
  }
  return path == p || (path.size() > p.size() && path.starts_with(p) && path[p.size()] == '.');
}

FromMapper::FromMapper(const FromTree& tree, FromFormat format, const RunOptions& flags)
    : tree_(tree), format_(format), flags_(flags) {
  options_.from = FromReport{tree.source, std::string(from_format_name(format)), {}, {}};
}

const FromValue* FromMapper::get(std::string_view path) {
  const FromValue* v = tree_.find(path);
  if (!v) return nullptr;
  read_.emplace_back(path);
  return v->null ? nullptr : v;
}

void FromMapper::read_under(std::string_view prefix) {
  for (const auto& v : tree_.values)
    if (key_matches(v.path, prefix)) read_.push_back(v.path);
}

void FromMapper::set(std::string_view flag, const std::string& value, const FromValue& from) {
  const RunOptionInfo& info = run_option(flag);
  options_.*info.text = Setting<std::string>{value, from.where};
  const std::string given =
      from.list ? fmt::format("[{}]", fmt::join(from.items, ", ")) : from.text;
  options_.from->used.push_back({from.path, given, std::string(flag), from.where});
}

void FromMapper::set(std::string_view flag, bool on, const FromValue& from) {
  const RunOptionInfo& info = run_option(flag);
  options_.*info.boolean = Setting<bool>{on, from.where};
  options_.from->used.push_back({from.path, from.text, std::string(flag), from.where});
}

void FromMapper::not_modelled(const FromValue& from, std::string_view why) {
  const std::string value =
      from.list ? fmt::format("[{}]", fmt::join(from.items, ", ")) : from.text;
  options_.from->not_modelled.push_back(fmt::format("{} = {}: {}", from.where, value, why));
}

RunOptions FromMapper::finish(std::span<const KeyPattern> ignored,
                              std::span<const KeyPattern> known) {
  for (const auto& v : tree_.values) {
    // A key left empty (YAML null) keeps the framework's default: nothing to model.
    if (v.null || std::find(read_.begin(), read_.end(), v.path) != read_.end()) continue;
    const auto matches = [&](const KeyPattern& p) { return key_matches(v.path, p.pattern); };
    if (std::any_of(ignored.begin(), ignored.end(), matches)) continue;
    const auto it = std::find_if(known.begin(), known.end(), matches);
    not_modelled(v, it != known.end() ? it->why
                                      : "not a key memest knows for this framework; it may "
                                        "change memory");
  }
  if (!options_.stack && !from_format_stack(format_).empty()) {
    options_.stack = Setting<std::string>{std::string(from_format_stack(format_)),
                                          fmt::format("--from {}", tree_.source)};
  }
  return options_;
}

}  // namespace memest
