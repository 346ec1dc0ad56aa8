// The JSON Schema of run configs (memest schema), read by a validator of the keywords it uses:
// every choice is an enum of its names, each of them validates and loads, the value kinds have
// their JSON types, and a JSON result's inputs are a valid run config.
#include "testutil.hpp"

#include <memest/run_config.hpp>
#include <memest/run_options.hpp>

#include <nlohmann/json.hpp>

#include <regex>

using namespace memest;
using nlohmann::json;

namespace {

bool type_ok(const json& schema, const json& v) {
  const std::string t = schema["type"];
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "object") return v.is_object();
  return false;
}

bool number_ok(const json& schema, const json& v) {
  if (!v.is_number()) return true;
  const double x = v.get<double>();
  if (schema.contains("minimum") && x < schema["minimum"].get<double>()) return false;
  if (schema.contains("maximum") && x > schema["maximum"].get<double>()) return false;
  return !schema.contains("exclusiveMaximum") || x < schema["exclusiveMaximum"].get<double>();
}

bool string_ok(const json& schema, const json& v) {
  if (!v.is_string()) return true;
  const auto s = v.get<std::string>();
  if (schema.contains("minLength") && s.size() < schema["minLength"].get<std::size_t>())
    return false;
  return !schema.contains("pattern") ||
         std::regex_search(s, std::regex(schema["pattern"].get<std::string>()));
}

bool valid(const json& schema, const json& v);

bool object_ok(const json& schema, const json& v) {
  if (!v.is_object()) return true;
  for (const auto& key : schema.value("required", json::array()))
    if (!v.contains(key.get<std::string>())) return false;
  const json properties = schema.value("properties", json::object());
  for (const auto& [key, value] : v.items()) {
    if (properties.contains(key)) {
      if (!valid(properties[key], value)) return false;
    } else if (schema.value("additionalProperties", true) == false) {
      return false;
    }
  }
  return true;
}

// The keywords `memest schema` writes: type, enum, const, anyOf, minimum, maximum,
// exclusiveMaximum, minLength, pattern, properties, required, additionalProperties.
bool valid(const json& schema, const json& v) {
  if (schema.contains("anyOf")) {
    const auto& any = schema["anyOf"];
    if (std::none_of(any.begin(), any.end(), [&](const json& s) { return valid(s, v); }))
      return false;
  }
  if (schema.contains("type") && !type_ok(schema, v)) return false;
  if (schema.contains("enum")) {
    const auto& e = schema["enum"];
    if (std::find(e.begin(), e.end(), v) == e.end()) return false;
  }
  if (schema.contains("const") && schema["const"] != v) return false;
  return number_ok(schema, v) && string_ok(schema, v) && object_ok(schema, v);
}

const json& schema() {
  static const json s = json::parse(run_config_schema());
  return s;
}

// The schema of one key: a section may also be given in short form (anyOf string, object).
json key_schema(const RunOptionInfo& info) {
  json section = schema()["properties"][info.section];
  if (section.contains("anyOf")) section = section["anyOf"][1];
  return section["properties"][info.key];
}

json config_with(const RunOptionInfo& info, const json& value) {
  json c = {{"model", {{"params", "7B"}}}};
  c[info.section][info.key] = value;
  return c;
}

}  // namespace

TEST_CASE("every choice option is an enum of its names in the schema", "[schema]") {
  for (const auto& info : run_option_table()) {
    if (info.kind != ValueKind::choice) continue;
    CAPTURE(info.flag);
    const json s = key_schema(info);
    json names = json::array();
    for (const auto n : info.choices()) names.push_back(n);
    const json& strings = s.contains("anyOf") ? s["anyOf"][1] : s;  // numbers first
    CHECK(strings["enum"] == names);
  }
}

TEST_CASE("a run config of each choice validates and loads, another name does not validate",
          "[schema]") {
  for (const auto& info : run_option_table()) {
    if (info.kind != ValueKind::choice) continue;
    for (const auto name : info.choices()) {
      CAPTURE(info.flag, name);
      const json c = config_with(info, name);
      CHECK(valid(schema(), c));
      const RunOptions o = parse_run_config(c.dump(), "t.json");
      CHECK((o.*info.text)->value == name);
      if (takes_number(info))
        CHECK(valid(schema(), config_with(info, std::stoi(std::string(name)))));
    }
    CAPTURE(info.flag);
    CHECK_FALSE(valid(schema(), config_with(info, "no-such-name")));
  }
}

TEST_CASE("the schema's JSON types are the value kinds'", "[schema]") {
  auto accepts = [](std::string_view flag, const json& v) {
    return valid(schema(), config_with(run_option(flag), v));
  };
  CHECK(accepts("--compile", true));
  CHECK_FALSE(accepts("--compile", "true"));
  CHECK(accepts("--batch", 4));
  CHECK(accepts("--batch", "4"));
  CHECK_FALSE(accepts("--batch", 0));
  CHECK(accepts("--params", "6.7B"));
  CHECK(accepts("--budget", "80GiB"));
  CHECK(accepts("--budget", 0));
  CHECK_FALSE(accepts("--budget", "80"));  // a size needs a unit
  CHECK(accepts("--context-reserve", "v100-cuda11.2"));
  CHECK(accepts("--dropout", 0.1));
  CHECK_FALSE(accepts("--dropout", 1));
  CHECK(accepts("--offload", "optimizer,activations"));
  CHECK(accepts("--offload", "none"));
  CHECK_FALSE(accepts("--offload", "none,optimizer"));
  CHECK(accepts("--freeze", "embedding,norm"));
  CHECK_FALSE(accepts("--freeze", "embedding,"));
  CHECK(accepts("--model", "meta-llama/Llama-2-7b-hf"));
  CHECK(accepts("--architecture", {{"model_type", "llama"}}));
  CHECK(accepts("--architecture", {{"model_type", "RefinedWeb"}}));  // read as falcon
  CHECK_FALSE(accepts("--architecture", {{"model_type", "no-such-model"}}));
  CHECK_FALSE(valid(schema(), {{"model", {{"params", "7B"}, {"nope", 1}}}}));
}

TEST_CASE("a JSON result's inputs are a valid run config", "[schema]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--params", "7B"},
           {"--model", "llama-2-7b", "--batch", "1", "--seq", "256", "--stack", "torchtune",
            "--lora-rank", "8", "--qlora", "--layer-clones", "--gpu", "a100-80gb"},
           {"--model", "gpt2", "--batch", "2", "--seq", "128", "--dp", "8", "--fsdp", "hybrid",
            "--fsdp-group", "4", "--zero", "3", "--fsdp-version", "2", "--budget", "24GB"},
           {"--architecture", R"({"model_type": "llama", "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
             "vocab_size": 100})",
            "--batch", "1", "--seq", "16", "--dropout", "0.1", "--zero-grad", "zero"},
       }) {
    const json j = test::run_json(args);
    INFO(j["inputs"].dump());
    CHECK(valid(schema(), j["inputs"]));
  }
}
