// Serve run configs: a JSON object of the serve options by key (the flag without its dashes),
// read into the values the flags give (every problem named by file and pointer, through the one
// JSON-access module), and the JSON Schema of such files, both from serve_options.cpp's rows.
#include "input/json_access.hpp"
#include "input/schema.hpp"

#include <memest/serve_config.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>

namespace memest {
namespace {

using nlohmann::ordered_json;

// The options a serve run config holds, as (key, row).
std::vector<std::pair<std::string, const ServeOptionInfo*>> serve_config_rows() {
  std::vector<std::pair<std::string, const ServeOptionInfo*>> out;
  for (const ServeOptionInfo& f : serve_option_table()) {
    if (f.config_key) out.emplace_back(serve_config_key(f.flag), &f);
  }
  return out;
}

// A count, a size or a fraction is a JSON number too (vLLM's bare byte counts among them).
bool serve_number_too(ValueKind kind) {
  return kind == ValueKind::count || kind == ValueKind::size || kind == ValueKind::fraction ||
         kind == ValueKind::number || kind == ValueKind::text;
}

// The value as its flag would take it: "" for a switch given true, nullopt for one given false.
std::optional<std::string> serve_text_of(const ServeOptionInfo& f, const detail::JsonValue& v,
                                         const std::filesystem::path& dir) {
  if (f.kind == ValueKind::flag) {
    return v.as_bool() ? std::optional<std::string>("") : std::nullopt;
  }
  std::string text = serve_number_too(f.kind) ? v.as_text() : v.as_string();
  if (f.kind == ValueKind::path && !text.empty() && std::filesystem::path(text).is_relative()) {
    text = (dir / text).lexically_normal().string();  // relative to the run config file
  }
  return text;
}

// A value as a run config writes it back: true for a switch, a JSON number where the option
// takes one and the text is that number as JSON writes it, an absolute path, else the text.
ordered_json serve_json_value(const ServeOptionInfo& f, const std::string& text) {
  if (f.kind == ValueKind::flag) return true;
  if (f.kind == ValueKind::path) return std::filesystem::absolute(text).lexically_normal().string();
  if (serve_number_too(f.kind)) {
    auto number = ordered_json::parse(text, nullptr, false);
    if (number.is_number() && number.dump() == text) return number;
  }
  return text;
}

// The value's schema: the run-option kinds' own, except that a size is also vLLM's bare byte
// count, and an option whose names differ by engine (--quantization, --dtype) takes any of its
// engines' names (each engine's own in allOf).
ordered_json serve_value_schema(const ServeOptionInfo& f) {
  if (serve_choices_differ(f)) {
    ordered_json names = ordered_json::array();
    for (std::size_t i = 0; i < serve_engine_names().size(); ++i) {
      const auto e = static_cast<ServeEngine>(i);
      if (!serve_option_applies(f, e)) continue;
      for (const auto n : serve_choices(f, e)) {
        if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
      }
    }
    return {{"type", "string"}, {"enum", names}};
  }
  RunOptionInfo as_run_option;
  as_run_option.kind = f.kind;
  as_run_option.choices = f.choices;
  ordered_json v = option_value_schema(as_run_option);
  if (f.kind == ValueKind::size) {
    v["anyOf"][0] = {{"type", "integer"}, {"minimum", 0}};
    v["anyOf"].push_back({{"type", "string"}, {"pattern", "^[0-9]+$"}});
  }
  return v;
}

// Under each engine: the other engine's keys refused, and the names of an option whose names
// differ by engine. The default engine's branch also holds when no engine is given.
ordered_json serve_engine_rules() {
  ordered_json rules = ordered_json::array();
  const auto engines = serve_engine_names();
  for (std::size_t i = 0; i < engines.size(); ++i) {
    const auto engine = static_cast<ServeEngine>(i);
    ordered_json when = {{"properties", {{"engine", {{"const", engines[i]}}}}}};
    if (i > 0) when["required"] = ordered_json::array({"engine"});
    ordered_json then = ordered_json::object();
    for (const auto& [key, f] : serve_config_rows()) {
      if (!serve_option_applies(*f, engine)) {
        then[key] = false;
      } else if (serve_choices_differ(*f)) {
        ordered_json names = ordered_json::array();
        for (const auto n : serve_choices(*f, engine)) names.push_back(n);
        then[key] = {{"enum", names}};
      }
    }
    rules.push_back({{"if", when}, {"then", {{"properties", then}}}});
  }
  return rules;
}

}  // namespace

ServeValues load_serve_config(const std::string& path) {
  const detail::Json root = detail::read_json_file(path);
  const detail::JsonObject doc(root, path);
  const auto rows = serve_config_rows();
  std::vector<std::string_view> known = {"$schema", "description"};
  for (const auto& [key, f] : rows) known.push_back(key);
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  ServeValues out;
  for (const auto& [key, value] : root.items()) {
    doc.check_key(key, known);
    const auto row = std::find_if(rows.begin(), rows.end(),
                                  [&, &key = key](const auto& r) { return r.first == key; });
    if (row == rows.end()) continue;  // $schema, description
    const detail::JsonValue v = doc.at(key);
    if (auto text = serve_text_of(*row->second, v, dir)) {
      out[row->second->flag] = ServeValue{*text, fmt::format("{}: {}", path, v.pointer())};
    }
  }
  return out;
}

std::string serve_config_of(const ServeValues& given) {
  ordered_json doc = ordered_json::object();
  for (const auto& [key, f] : serve_config_rows()) {
    const auto it = given.find(f->flag);
    if (it != given.end()) doc[key] = serve_json_value(*f, it->second.text);
  }
  if (!doc.contains("engine")) doc["engine"] = find_serve_option("--engine")->fallback.value;
  return doc.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

std::string serve_config_schema() {
  ordered_json properties = {{"$schema", {{"type", "string"}}},
                             {"description", {{"type", "string"}}}};
  for (const auto& [key, f] : serve_config_rows()) {
    ordered_json v = serve_value_schema(*f);
    v["description"] = fmt::format("{} (flag {})", f->help, f->flag);
    properties[key] = v;
  }
  const ordered_json schema = {
      {"$schema", "https://json-schema.org/draft/2020-12/schema"},
      {"$id", "https://memest.invalid/schema/serve.schema.json"},
      {"title", "memest serve run config"},
      {"description",
       "One inference server for memest serve --file: the model, the engine and the engine's "
       "own settings, each key a flag of memest serve without its dashes ('-' as '_'); flags "
       "override the file. Each engine's keys are refused under the other engines."},
      {"type", "object"},
      {"additionalProperties", false},
      {"properties", properties},
      {"allOf", serve_engine_rules()}};
  return schema.dump(2) + "\n";
}

}  // namespace memest
