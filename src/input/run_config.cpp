// Run config files: the loader (JSON into RunOptions, every problem named by file and pointer)
// and the writer (the run config that reproduces a run: the JSON echo's `inputs`). It uses config
// (the option table, resolve), stacks and json_access; none of them calls back into it.
#include "input/json_access.hpp"
#include "input/model_loading.hpp"
#include "input/stacks.hpp"
#include "input/versions.hpp"

#include <memest/error.hpp>
#include <memest/run_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>

namespace memest {
namespace {

using detail::Json;
using detail::JsonObject;
using detail::JsonValue;

std::vector<std::string_view> keys_of_section(const std::string& section) {
  std::vector<std::string_view> keys;
  for (const auto& info : run_option_table()) {
    if (info.section == section) keys.push_back(info.key);
  }
  return keys;
}

// Reads a run config into RunOptions, collecting one message per problem rather than stopping at
// the first, so that one run shows everything wrong with the file.
class Loader {
 public:
  Loader(std::string source, std::filesystem::path dir)
      : source_(std::move(source)), dir_(std::move(dir)) {}

  void load(const Json& root) {
    attempt([&] {
      const JsonObject doc(root, source_);
      static const std::vector<std::string_view> sections = {"model",    "optimizer", "precision",
                                                             "training", "parallel",  "hardware"};
      for (const auto& [name, value] : root.items()) {
        if (name == "$schema" || name == "description") continue;
        attempt([&, &name = name] {
          doc.check_key(name, sections);
          section(name, doc.at(name));
        });
      }
    });
  }

  RunOptions options;
  std::vector<std::string> problems;

 private:
  template <typename F>
  void attempt(F f) {
    try {
      f();
    } catch (const Error& e) {
      problems.emplace_back(e.what());
    }
  }

  // "optimizer": "adamw" and "precision": "amp" are short for {"name": ...}/{"preset": ...}.
  void section(const std::string& name, const JsonValue& value) {
    if (value.json().is_string() &&
        (name == "optimizer" || name == "precision" || name == "model")) {
      set_key(name, name == "precision" ? "preset" : "name", value);
      return;
    }
    const JsonObject object(value);
    const auto keys = keys_of_section(name);
    for (const auto& [key, v] : value.json().items()) {
      attempt([&, &key = key] {
        object.check_key(key, keys);
        set_key(name, key, object.at(key));
      });
    }
  }

  void set_key(const std::string& section_name, const std::string& key, const JsonValue& v) {
    for (const auto& info : run_option_table()) {
      if (info.section != section_name || info.key != key) continue;
      const std::string where = fmt::format("{}: {}", source_, v.pointer());
      if (info.boolean) {
        options.*info.boolean = Setting<bool>{v.as_bool(), where};
        return;
      }
      options.*info.text = Setting<std::string>{text_of(info, v), where};
      return;
    }
  }

  // The value as its flag would take it, the JSON types checked by the option's kind.
  std::string text_of(const RunOptionInfo& info, const JsonValue& v) const {
    if (info.kind == ValueKind::json && v.json().is_object()) return v.json().dump();
    if (info.kind == ValueKind::versions) return versions_text(v);
    std::string text = takes_number(info) ? v.as_text() : v.as_string();
    if (info.kind == ValueKind::path && !text.empty() &&
        std::filesystem::path(text).is_relative()) {
      text = (dir_ / text).lexically_normal().string();  // relative to the run config file
    }
    return text;
  }

  // {"torch": "1.10"} as --versions takes it: torch=1.10; each version a string.
  static std::string versions_text(const JsonValue& v) {
    const JsonObject object(v);
    std::vector<std::string> items;
    for (const auto& [package, version] : v.json().items())
      items.push_back(package + "=" + object.at(package).as_string());
    return fmt::format("{}", fmt::join(items, ","));
  }

  std::string source_;
  std::filesystem::path dir_;
};

RunOptions options_from_json(const Json& root, const std::string& source) {
  Loader loader(source, std::filesystem::path(source).parent_path());
  loader.load(root);
  if (!loader.problems.empty()) {
    // Report the values' problems too, so that one run shows everything wrong with the file.
    try {
      resolve(loader.options);
    } catch (const Error& e) {
      std::istringstream lines(e.what());
      for (std::string line; std::getline(lines, line);) {
        if (!line.starts_with("no model given")) loader.problems.push_back(line);
      }
    }
    throw Error(fmt::format("{}", fmt::join(loader.problems, "\n")));
  }
  return loader.options;
}

// The options with each older or shorter spelling written as the option it names.
RunOptions canonical_spellings(RunOptions o) {
  if (o.amp && o.amp->value) o.precision = Setting<std::string>{"amp", o.amp->where};
  if (o.fused_optimizer && o.fused_optimizer->value)
    o.optimizer_impl = Setting<std::string>{"fused", o.fused_optimizer->where};
  const std::string loading(model_loading_name(model_loading_of(o)));
  o.model_loading = Setting<std::string>{loading, o.model_loading ? o.model_loading->where : ""};
  for (const auto& info : run_option_table()) {
    if (info.alias_of.empty()) continue;
    if (info.text) (o.*info.text).reset();
    if (info.boolean) (o.*info.boolean).reset();
  }
  return o;
}

// A value in the JSON type its key reads back the same: a number where the option takes one
// and the text is that number as JSON writes it, an object for an inline config.json, an
// absolute path, else the text.
nlohmann::ordered_json json_value(const RunOptionInfo& info, const std::string& v) {
  using nlohmann::ordered_json;
  switch (info.kind) {
    case ValueKind::flag:
      return v == "true";
    case ValueKind::json:
      return ordered_json::parse(v, nullptr, true, true);
    case ValueKind::versions: {  // {"torch": "1.10"}, in the order given
      ordered_json object = ordered_json::object();
      for (const auto& [package, version] : parse_versions(v, "")) object[package] = version;
      return object;
    }
    case ValueKind::path:
      return std::filesystem::absolute(v).lexically_normal().string();
    default:
      break;
  }
  if (takes_number(info)) {
    auto number = ordered_json::parse(v, nullptr, false);
    if (number.is_number() && number.dump() == v) return number;
  }
  return v;
}

}  // namespace

std::string run_config_of(const RunOptions& options) {
  const RunOptions o = canonical_spellings(with_stack(options));
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  for (const auto& info : run_option_table()) {
    if (!info.alias_of.empty() || !applies(o, info)) continue;
    const auto v = effective_value(o, info);
    if (v) doc[info.section][info.key] = json_value(info, *v);
  }
  // A path need not be UTF-8; JSON text must be: such bytes are written as U+FFFD.
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

RunOptions parse_run_config(std::string_view json_text, const std::string& source) {
  return options_from_json(detail::parse_json(json_text, source), source);
}

RunOptions load_run_config(const std::string& path) {
  return options_from_json(detail::read_json_file(path), path);
}

}  // namespace memest
