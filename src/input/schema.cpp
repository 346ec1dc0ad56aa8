// The JSON Schema of run config files, generated from the run option table (each option's value
// kind and names) so that the schema, the loader and the flags cannot disagree on which keys
// exist and what they take.
#include "input/schema.hpp"

#include "input/hf_families.hpp"
#include "input/versions.hpp"

#include <memest/hf_config.hpp>
#include <memest/run_config.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>

namespace memest {
namespace {

using nlohmann::ordered_json;

ordered_json names_of(std::span<const std::string_view> names) {
  ordered_json e = ordered_json::array();
  for (auto n : names) e.push_back(n);
  return e;
}

ordered_json enum_of(ordered_json names) {
  return {{"type", "string"}, {"enum", std::move(names)}};
}

// A comma-separated list of names, as --freeze and --lora-targets take.
ordered_json list_of(std::span<const std::string_view> names) {
  // fmt rather than string operator+: GCC 12 at -O3 warns falsely on the latter (-Wrestrict,
  // GCC bug 105329).
  const std::string alt = fmt::format("{}", fmt::join(names, "|"));
  return {{"type", "string"}, {"pattern", fmt::format("^({0})(,({0}))*$", alt)}};
}

ordered_json positive_integer() {
  return {{"anyOf", ordered_json::array({{{"type", "integer"}, {"minimum", 1}},
                                         {{"type", "string"}, {"pattern", "^[1-9][0-9]*$"}}})}};
}

ordered_json count() {
  return {{"anyOf", ordered_json::array(
                        {{{"type", "integer"}, {"minimum", 1}},
                         {{"type", "string"},
                          {"pattern", "^[0-9]*\\.?[0-9]+([eE][+]?[0-9]+)?[kKmMbBgGtT]?$"}}})}};
}

// "GiB" as "[gG][iI][bB]": JSON Schema patterns have no case-insensitive flag.
std::string any_case(std::string_view word) {
  std::string out;
  for (const char c : word) {
    const auto u = static_cast<unsigned char>(c);
    out += fmt::format("[{}{}]", static_cast<char>(std::tolower(u)),
                       static_cast<char>(std::toupper(u)));
  }
  return out;
}

// A size needs a unit (any case); 0 alone means none.
ordered_json size() {
  std::vector<std::string> units = {any_case("B")};
  for (const auto name : unit_names()) units.push_back(any_case(name));
  return {{"anyOf", ordered_json::array({{{"type", "integer"}, {"const", 0}},
                                         {{"type", "string"},
                                          {"pattern", fmt::format("^0$|^[0-9]*\\.?[0-9]+ ?({})$",
                                                                  fmt::join(units, "|"))}}})}};
}

// A choice whose names are whole numbers (--zero, --fsdp-version) is a JSON number too.
ordered_json choice_of(const RunOptionInfo& info) {
  ordered_json names = names_of(info.choices());
  if (!takes_number(info)) return enum_of(std::move(names));
  ordered_json numbers = ordered_json::array();
  for (const auto& n : names) numbers.push_back(std::stoi(n.get<std::string>()));
  return {{"anyOf", ordered_json::array(
                        {{{"type", "integer"}, {"enum", numbers}}, enum_of(std::move(names))})}};
}

ordered_json probability() {
  return {
      {"anyOf", ordered_json::array({{{"type", "number"}, {"minimum", 0}, {"exclusiveMaximum", 1}},
                                     {{"type", "string"}, {"pattern", "^0?\\.[0-9]+$|^0$"}}})}};
}

ordered_json positive_number() {
  return {
      {"anyOf", ordered_json::array({{{"type", "number"}, {"exclusiveMinimum", 0}},
                                     {{"type", "string"}, {"pattern", "^[0-9]*\\.?[0-9]+$"}}})}};
}

// vLLM's --gpu-memory-utilization: above 0, at most 1.
ordered_json fraction_schema() {
  return {
      {"anyOf", ordered_json::array(
                    {{{"type", "number"}, {"exclusiveMinimum", 0}, {"maximum", 1}},
                     {{"type", "string"}, {"pattern", "^(0?\\.[0-9]*[1-9][0-9]*|1(\\.0+)?)$"}}})}};
}

// none, or a comma-separated list: the names that stand alone, or a list of the others.
ordered_json list_schema(const RunOptionInfo& info) {
  ordered_json list = list_of(info.choices());
  if (info.alone.empty()) return list;
  const std::string items = fmt::format("{}", fmt::join(info.choices(), "|"));
  return {
      {"type", "string"},
      {"pattern", fmt::format("^({}|({})(,({}))*)$", fmt::join(info.alone, "|"), items, items)}};
}

// An inline config.json: an object with a model_type memest reads.
ordered_json architecture() {
  ordered_json types = names_of(supported_model_types());
  for (const auto legacy : detail::falcon_legacy_types()) types.push_back(legacy);
  return {{"type", "object"},
          {"required", ordered_json::array({"model_type"})},
          {"properties", {{"model_type", enum_of(std::move(types))}}}};
}

// --versions: an object of package names, each a version as a string ("1.10" is not 1.1).
ordered_json versions_schema() {
  return {{"type", "object"},
          {"propertyNames", enum_of(names_of(versioned_packages()))},
          {"additionalProperties", {{"type", "string"}, {"pattern", "^[0-9]+(\\.[0-9]+)*"}}}};
}

}  // namespace

ordered_json option_value_schema(const RunOptionInfo& info) {
  switch (info.kind) {
    case ValueKind::flag:
      return {{"type", "boolean"}};
    case ValueKind::count:
      return positive_integer();
    case ValueKind::param_count:
      return count();
    case ValueKind::probability:
      return probability();
    case ValueKind::number:
      return positive_number();
    case ValueKind::fraction:
      return fraction_schema();
    case ValueKind::choice:
      return choice_of(info);
    case ValueKind::list:
      return list_schema(info);
    case ValueKind::json:
      return architecture();
    case ValueKind::versions:
      return versions_schema();
    case ValueKind::path:
      return {{"type", "string"}, {"minLength", 1}};
    case ValueKind::text:  // read by the option itself: a string, or a number for one number
      return {{"anyOf", ordered_json::array({{{"type", "string"}, {"minLength", 1}},
                                             {{"type", "number"}, {"minimum", 0}}})}};
    case ValueKind::name:  // a name listed, or a Hub id ("org/name") looked up
      return {{"anyOf",
               ordered_json::array({enum_of(names_of(info.choices())),
                                    {{"type", "string"}, {"pattern", "^[^/\\s]+/[^/\\s]+$"}}})}};
    case ValueKind::size: {  // a size, or a stated one by name
      if (!info.choices) return size();
      ordered_json any = size()["anyOf"];
      any.push_back(enum_of(names_of(info.choices())));
      return {{"anyOf", any}};
    }
  }
  return {};
}

std::string run_config_schema() {
  ordered_json sections = ordered_json::object();
  for (const auto& info : run_option_table()) {
    auto& sec = sections[info.section];
    if (sec.is_null()) {
      sec = {{"type", "object"},
             {"additionalProperties", false},
             {"properties", ordered_json::object()}};
    }
    ordered_json v = option_value_schema(info);
    v["description"] = fmt::format("{} (flag {})", info.help, info.flag);
    sec["properties"][info.key] = v;
  }
  // "optimizer": "adamw", "precision": "amp" and "model": "llama-2-7b" are short forms.
  for (const auto& [name, key] : {std::pair{"optimizer", "name"}, std::pair{"precision", "preset"},
                                  std::pair{"model", "name"}}) {
    ordered_json object = sections[name];
    ordered_json short_form = sections[name]["properties"][key];
    short_form.erase("description");
    sections[name] = {{"anyOf", ordered_json::array({short_form, object})}};
  }
  ordered_json properties = {{"$schema", {{"type", "string"}}},
                             {"description", {{"type", "string"}}}};
  for (auto& [name, sec] : sections.items()) properties[name] = sec;
  ordered_json schema = {
      {"$schema", "https://json-schema.org/draft/2020-12/schema"},
      {"$id", "https://memest.invalid/schema/run.schema.json"},
      {"title", "memest run config"},
      {"description",
       "One training run for memest: model, optimizer, precision, training and hardware. Every "
       "key has a command-line flag of the same meaning; flags override the file."},
      {"type", "object"},
      {"additionalProperties", false},
      {"properties", properties}};
  return schema.dump(2) + "\n";
}

}  // namespace memest
