#include "input/json_access.hpp"

#include <memest/error.hpp>
#include <memest/suggest.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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

const char* file_kind(std::filesystem::file_type t) {
  using T = std::filesystem::file_type;
  switch (t) {
    case T::fifo:
      return "a FIFO";
    case T::character:
      return "a character device";
    case T::block:
      return "a block device";
    case T::socket:
      return "a socket";
    default:
      return "not a plain file";
  }
}

bool is_non_negative_integer(const Json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<std::int64_t>() >= 0);
}

// Builds the document from nlohmann's SAX events, which lets the loaders say what the DOM
// parser cannot: the pointer of a number past a double's range (1e400), a key given twice (the
// DOM parser keeps the last, so a second hidden_size would change the model silently) and nesting
// past kMaxJsonDepth (the parser is iterative, but dump() and copies recurse).
class DomBuilder {
 public:
  explicit DomBuilder(const std::string& source) : source_(source) {}

  bool null() { return put(nullptr) != nullptr; }
  bool boolean(bool v) { return put(v) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return put(v) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return put(v) != nullptr; }
  bool number_float(Json::number_float_t v, const std::string&) { return put(v) != nullptr; }
  bool string(std::string& v) { return put(std::move(v)) != nullptr; }
  bool binary(Json::binary_t&) { return fail(pointer(), "binary values are not JSON"); }
  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    Frame& f = stack_.back();
    if (f.value->contains(k)) {
      return fail(f.pointer + "/" + pointer_token(k),
                  "duplicate key (each key may appear once in an object)");
    }
    f.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string& token, const nlohmann::detail::exception& e) {
    if (e.id == 406) {  // out_of_range.406: a number past a double's range
      return fail(pointer(), fmt::format("number {} is out of range (expected a number of "
                                         "magnitude at most 1.8e308, a double's limit)",
                                         token));
    }
    // nlohmann prefixes "[json.exception.parse_error.101] "; users need only the rest.
    std::string what = e.what();
    if (const auto p = what.find("] "); what.starts_with("[json.exception") && p != what.npos) {
      what.erase(0, p + 2);
    }
    message_ = fmt::format("{}: invalid JSON: {}", source_, what);
    return false;
  }

  Json take() {
    if (!message_.empty()) throw Error(message_);
    return std::move(root_);
  }

 private:
  struct Frame {
    Json* value;
    std::string pointer;
    std::string key;  // the member being read, in an object
  };

  // The pointer of the value being read next.
  std::string pointer() const {
    if (stack_.empty()) return "/";
    const Frame& f = stack_.back();
    if (f.value->is_object()) return f.pointer + "/" + pointer_token(f.key);
    return fmt::format("{}/{}", f.pointer, f.value->size());
  }

  bool fail(const std::string& pointer, std::string_view problem) {
    message_ = fmt::format("{}: {}: {}", source_, pointer, problem);
    return false;
  }

  // Stores `v` where the parser is and returns it; the pointers on the stack stay valid, as each
  // container grows only while it is the innermost one.
  Json* put(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json& parent = *stack_.back().value;
    if (parent.is_object()) return &(parent[stack_.back().key] = std::move(v));
    parent.push_back(std::move(v));
    return &parent.back();
  }

  bool open(Json v) {
    if (stack_.size() >= kMaxJsonDepth) {
      return fail(pointer(), fmt::format("nested deeper than {} levels (a config file needs a few)",
                                         kMaxJsonDepth));
    }
    std::string at = stack_.empty() ? "" : pointer();
    stack_.push_back(Frame{put(std::move(v)), std::move(at), {}});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  const std::string& source_;
  Json root_;
  std::vector<Frame> stack_;
  std::string message_;
};

}  // namespace

Json parse_json(std::string_view text, const std::string& source) {
  DomBuilder builder(source);
  Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/true);
  return builder.take();
}

Json read_json_file(const std::string& path) { return parse_json(read_config_file(path), path); }

std::string read_config_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    throw Error(
        fmt::format("{}: cannot open file: {}", path, ec ? ec.message() : std::strerror(ENOENT)));
  }
  // A FIFO would block forever and /dev/zero never end: only regular files are config files.
  if (fs::is_directory(st)) {
    throw Error(fmt::format("{}: cannot open file: {}", path, std::strerror(EISDIR)));
  }
  if (!fs::is_regular_file(st)) {
    throw Error(
        fmt::format("{}: cannot open file: not a regular file ({})", path, file_kind(st.type())));
  }
  const auto too_large = [&] {
    return Error(fmt::format("{}: file is larger than {} bytes, the limit for a config file", path,
                             kMaxConfigFileBytes));
  };
  if (fs::file_size(path, ec) > kMaxConfigFileBytes && !ec) throw too_large();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  std::string text;
  std::array<char, 65536> chunk{};
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigFileBytes) throw too_large();  // it grew while being read
  }
  if (in.bad()) throw Error(fmt::format("{}: cannot read file: {}", path, std::strerror(errno)));
  return text;
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

std::vector<std::string> JsonValue::as_string_list() const {
  if (!json().is_array()) fail("expected an array of names, got " + describe(json()));
  std::vector<std::string> out;
  for (const Json& e : json()) {
    if (!e.is_string()) fail("expected an array of names, got an element " + describe(e));
    out.push_back(e.get<std::string>());
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

std::vector<std::string> JsonObject::string_list(std::string_view key) const {
  const auto v = find({key});
  return v ? v->as_string_list() : std::vector<std::string>{};
}

}  // namespace memest::detail
