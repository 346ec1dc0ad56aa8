// The JSON Schema of run config files, generated from the run option table so that the schema,
// the loader and the flags cannot disagree on which keys exist.
#include "input/stacks.hpp"
#include "model/adapters.hpp"

#include <memest/hardware.hpp>
#include <memest/hf_config.hpp>
#include <memest/run_config.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>

namespace memest {
namespace {

using nlohmann::ordered_json;

ordered_json names_of(std::span<const std::string_view> names, bool with_none = false) {
  ordered_json e = ordered_json::array();
  if (with_none) e.push_back("none");
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

std::vector<std::string_view> preset_names() {
  static const auto presets = model_presets();
  std::vector<std::string_view> names;
  names.reserve(presets.size());
  for (const auto& p : presets) names.push_back(p.name);
  return names;
}

std::vector<std::string_view> gpu_names() {
  std::vector<std::string_view> names;
  for (const auto& g : gpu_presets()) names.push_back(g.name);
  return names;
}

ordered_json value_schema(const RunOptionInfo& info) {
  if (info.boolean) return {{"type", "boolean"}};
  const std::string k = info.section + "/" + info.key;
  if (k == "model/params") return count();
  if (k == "model/name") {
    // A preset, or a Hub id ("org/name") memest finds among the presets or in the local cache.
    return {
        {"anyOf", ordered_json::array({enum_of(names_of(preset_names())),
                                       {{"type", "string"}, {"pattern", "^[^/\\s]+/[^/\\s]+$"}}})}};
  }
  if (k == "model/config") return {{"type", "string"}, {"minLength", 1}};
  if (k == "model/architecture") {
    return {{"type", "object"}, {"required", ordered_json::array({"model_type"})}};
  }
  if (k == "model/freeze") return list_of(role_names());
  if (k == "model/lora_targets") return list_of(lora_target_names());
  if (k == "optimizer/name") return enum_of(names_of(optimizer_names()));
  if (k == "optimizer/impl") return enum_of(names_of(optimizer_impl_names()));
  if (k == "precision/preset") return enum_of(names_of(precision_names()));
  if (k == "precision/master_dtype" || k == "precision/working_dtype" ||
      k == "precision/grad_accum_dtype") {
    return enum_of(names_of(dtype_names(), true));
  }
  if (info.section == "precision") return enum_of(names_of(dtype_names()));
  if (k == "training/attention") return enum_of(names_of(attention_names()));
  if (k == "training/recompute") return enum_of(names_of(recompute_names()));
  if (k == "training/device") return enum_of(names_of(device_names()));
  if (k == "training/loss") return enum_of(names_of(loss_names()));
  if (k == "training/stack") return enum_of(names_of(stack_names()));
  if (k == "training/zero_grad") return enum_of({"none", "zero"});
  if (k == "training/dropout" || k == "model/lora_dropout") {
    return {{"anyOf",
             ordered_json::array({{{"type", "number"}, {"minimum", 0}, {"exclusiveMaximum", 1}},
                                  {{"type", "string"}, {"pattern", "^0?\\.[0-9]+$|^0$"}}})}};
  }
  if (k == "parallel/zero_stage") {
    return {{"anyOf", ordered_json::array({{{"type", "integer"}, {"minimum", 0}, {"maximum", 3}},
                                           {{"type", "string"}, {"enum", {"0", "1", "2", "3"}}}})}};
  }
  if (k == "parallel/offload") {  // none, or a comma-separated list
    return {
        {"type", "string"},
        {"pattern", "^(none|(optimizer|params|activations)(,(optimizer|params|activations))*)$"}};
  }
  if (k == "parallel/fsdp") return enum_of({"full", "hybrid", "grad-op", "no-shard"});
  if (k == "parallel/fsdp_version") {
    return {{"anyOf", ordered_json::array({{{"type", "integer"}, {"minimum", 1}, {"maximum", 2}},
                                           {{"type", "string"}, {"enum", {"1", "2"}}}})}};
  }
  if (k == "parallel/fsdp_param_dtype" || k == "parallel/fsdp_reduce_dtype")
    return enum_of(names_of(dtype_names()));
  if (k == "hardware/allocator") return enum_of(names_of(allocator_names()));
  if (k == "hardware/gpu") return enum_of(names_of(gpu_names()));
  if (k == "hardware/context_reserve") {  // a size, or a stated context by name
    std::vector<std::string_view> names;
    for (const auto& c : cuda_context_presets()) names.push_back(c.name);
    ordered_json any = size()["anyOf"];
    any.push_back(enum_of(names_of(names)));
    return {{"anyOf", any}};
  }
  if (k == "hardware/budget" || k == "hardware/reserve") return size();
  return positive_integer();  // lora_rank, micro_batch, seq_len, grad_accum
}

}  // namespace

std::string run_config_schema() {
  ordered_json sections = ordered_json::object();
  for (const auto& info : run_option_table()) {
    auto& sec = sections[info.section];
    if (sec.is_null()) {
      sec = {{"type", "object"},
             {"additionalProperties", false},
             {"properties", ordered_json::object()}};
    }
    ordered_json v = value_schema(info);
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
