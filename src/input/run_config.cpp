// The run-config file loader: JSON into RunOptions, every problem named by file and pointer. It
// uses config (the option table, resolve) and json_access; neither calls back into it.
#include "input/json_access.hpp"

#include <memest/error.hpp>
#include <memest/run_config.hpp>

#include <fmt/format.h>

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
      if (info.text == &RunOptions::architecture && v.json().is_object()) {
        options.*info.text = Setting<std::string>{v.json().dump(), where};
        return;
      }
      std::string text = info.json_number ? v.as_text() : v.as_string();
      if (info.text == &RunOptions::config && !text.empty() &&
          std::filesystem::path(text).is_relative()) {
        text = (dir_ / text).lexically_normal().string();  // relative to the run config file
      }
      options.*info.text = Setting<std::string>{text, where};
      return;
    }
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

}  // namespace

RunOptions parse_run_config(std::string_view json_text, const std::string& source) {
  return options_from_json(detail::parse_json(json_text, source), source);
}

RunOptions load_run_config(const std::string& path) {
  return options_from_json(detail::read_json_file(path), path);
}

}  // namespace memest
