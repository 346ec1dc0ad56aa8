#include "json_access.hpp"

#include <memest/error.hpp>
#include <memest/suggest.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace memest::detail {
namespace {

// A key as one reference token of a JSON pointer (RFC 6901): "~" is "~0" and "/" is "~1".
std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

bool is_non_negative_integer(const Json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
}

}  // namespace

Json parse_json(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    // nlohmann prefixes "[json.exception.parse_error.101] "; users need only the rest.
    std::string what = e.what();
    if (const auto p = what.find("] "); what.starts_with("[json.exception") && p != what.npos) {
      what.erase(0, p + 2);
    }
    throw Error(fmt::format("{}: invalid JSON: {}", source, what));
  }
}

Json read_json_file(const std::string& path) {
  // An ifstream opens a directory on Linux and then reads nothing, which would read as invalid
  // JSON; say what it is instead.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(fmt::format("{}: cannot open file: {}", path, std::strerror(EISDIR)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: cannot read file: {}", path, std::strerror(errno)));
  return parse_json(text.str(), path);
}

std::string describe(const Json& v) {
  if (v.is_string()) return "string " + v.dump();
  if (v.is_number()) return "number " + v.dump();
  if (v.is_boolean()) return "boolean " + v.dump();
  if (v.is_null()) return "null";
  return v.is_array() ? "an array" : "an object";
}

void JsonValue::fail(std::string_view problem) const {
  throw Error(fmt::format("{}: {}: {}", source(), pointer(), problem));
}

std::uint64_t JsonValue::as_uint(bool allow_zero) const {
  if (!is_non_negative_integer(json()) || (!allow_zero && json().get<std::uint64_t>() == 0)) {
    fail(fmt::format("expected a {} integer, got {}", allow_zero ? "non-negative" : "positive",
                     describe(json())));
  }
  return json().get<std::uint64_t>();
}

bool JsonValue::as_bool() const {
  if (!json().is_boolean()) fail("expected true or false, got " + describe(json()));
  return json().get<bool>();
}

double JsonValue::as_probability() const {
  if (!json().is_number() || json().get<double>() < 0.0 || json().get<double>() > 1.0) {
    fail("expected a number between 0 and 1, got " + describe(json()));
  }
  return json().get<double>();
}

std::string JsonValue::as_string() const {
  if (!json().is_string()) fail("expected a string, got " + describe(json()));
  return json().get<std::string>();
}

std::string JsonValue::as_text() const {
  if (json().is_number()) return json().dump();
  if (!json().is_string()) fail("expected a number or a string, got " + describe(json()));
  return json().get<std::string>();
}

std::vector<std::uint64_t> JsonValue::as_index_list() const {
  if (!json().is_array()) fail("expected an array of layer indices, got " + describe(json()));
  std::vector<std::uint64_t> out;
  for (const Json& e : json()) {
    if (!is_non_negative_integer(e)) {
      fail("expected an array of layer indices, got an element " + describe(e));
    }
    out.push_back(e.get<std::uint64_t>());
  }
  return out;
}

JsonObject::JsonObject(JsonValue v) : value_(std::move(v)) {
  if (!value_.json().is_object()) {
    value_.fail("expected an object, got " + describe(value_.json()));
  }
}

JsonValue JsonObject::at(std::string_view key) const {
  return JsonValue(json().at(key), value_.source(), value_.pointer_ + "/" + pointer_token(key));
}

void JsonObject::fail(std::string_view key, std::string_view problem) const {
  throw Error(
      fmt::format("{}: {}/{}: {}", value_.source(), value_.pointer_, pointer_token(key), problem));
}

void JsonObject::check_key(std::string_view key, std::span<const std::string_view> known) const {
  if (std::find(known.begin(), known.end(), key) != known.end()) return;
  std::string hint = did_you_mean(key, known);
  if (hint.empty()) hint = fmt::format(" (expected one of: {})", fmt::join(known, ", "));
  fail(key, "unknown key" + hint);
}

std::optional<JsonValue> JsonObject::find(std::initializer_list<std::string_view> keys) const {
  for (std::string_view k : keys) {
    if (const auto it = json().find(k); it != json().end() && !it->is_null()) return at(k);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> JsonObject::opt_uint(std::initializer_list<std::string_view> keys,
                                                  bool allow_zero) const {
  const auto v = find(keys);
  if (!v) return std::nullopt;
  return v->as_uint(allow_zero);
}

std::uint64_t JsonObject::uint(std::initializer_list<std::string_view> keys, std::uint64_t fallback,
                               bool allow_zero) const {
  return opt_uint(keys, allow_zero).value_or(fallback);
}

std::uint64_t JsonObject::required(std::initializer_list<std::string_view> keys) const {
  const auto v = opt_uint(keys);
  if (!v) fail(*keys.begin(), "missing required key");
  return *v;
}

bool JsonObject::boolean(std::initializer_list<std::string_view> keys, bool fallback) const {
  const auto v = find(keys);
  return v ? v->as_bool() : fallback;
}

double JsonObject::probability(std::initializer_list<std::string_view> keys,
                               double fallback) const {
  const auto v = find(keys);
  return v ? v->as_probability() : fallback;
}

std::string JsonObject::string(std::initializer_list<std::string_view> keys,
                               std::string fallback) const {
  const auto v = find(keys);
  if (!v) return fallback;
  return v->as_string();
}

std::vector<std::uint64_t> JsonObject::uint_list(std::string_view key) const {
  const auto v = find({key});
  return v ? v->as_index_list() : std::vector<std::uint64_t>{};
}

}  // namespace memest::detail
