#pragma once
// Private: the one way the loaders read JSON (config.json files in hf_config.cpp, run configs in
// run_config.cpp), so that the same problem gets the same words whichever file has it. Every
// message is `<source>: <json pointer>: <problem>`, the bad value described and the expected form
// stated.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest::detail {

using Json = nlohmann::json;

/// The largest config file read (16 MiB): config files are kilobytes, and a cap keeps a wrong
/// path from being read until memory runs out.
inline constexpr std::uint64_t kMaxConfigFileBytes = 16 * 1024 * 1024;

/// The deepest nesting of arrays and objects accepted (config files use three or four levels).
inline constexpr std::size_t kMaxJsonDepth = 64;

/// Parses JSON text, comments allowed; throws Error `<source>: invalid JSON: parse error at line
/// L, column C: ...` (without nlohmann's `[json.exception...] ` prefix), or `<source>: <pointer>:
/// <problem>` for a number past a double's range, a duplicate key or nesting past kMaxJsonDepth.
Json parse_json(std::string_view text, const std::string& source);

/// The text of the config file at `path`, which names it in messages. Throws Error `<path>:
/// cannot open file: <reason>` when it is missing, a directory, not a regular file (a FIFO, a
/// device) or unreadable, and `<path>: file is larger than ...` past kMaxConfigFileBytes.
std::string read_config_file(const std::string& path);

/// Reads and parses the file at `path`: read_config_file, then parse_json.
Json read_json_file(const std::string& path);

/// A value as messages show it: `string "4k"`, `number -2`, `boolean true`, `null`, `an array`,
/// `an object`.
std::string describe(const Json& v);

/// One value of a document with the document's name and the value's JSON pointer; its checked
/// getters throw Error `<source>: <pointer>: expected <form>, got <value>`.
class JsonValue {
 public:
  JsonValue(const Json& v, std::string source, std::string pointer)
      : v_(&v), source_(std::move(source)), pointer_(std::move(pointer)) {}

  const Json& json() const { return *v_; }
  const std::string& source() const { return source_; }
  /// The JSON pointer ("/model/config"); "/" for the whole document.
  std::string pointer() const { return pointer_.empty() ? "/" : pointer_; }

  [[noreturn]] void fail(std::string_view problem) const;

  std::uint64_t as_uint(bool allow_zero = false) const;  ///< a positive (or non-negative) integer
  bool as_bool() const;                                  ///< true or false
  double as_probability() const;                         ///< a number between 0 and 1
  std::string as_string() const;
  std::string as_text() const;  ///< a string, or a number as the file writes it
  std::vector<std::uint64_t> as_index_list() const;  ///< an array of non-negative integers
  std::vector<std::string> as_string_list() const;   ///< an array of strings

 private:
  friend class JsonObject;
  const Json* v_;
  std::string source_;
  std::string pointer_;  // "" for the document itself
};

/// An object of a document. Getters that take several keys read the first one present: a key may
/// have legacy spellings (GPT-2's n_embd for hidden_size), and a null value counts as absent, as
/// transformers treats `"n_inner": null`.
class JsonObject {
 public:
  /// Throws `<source>: <pointer>: expected an object, got <value>` unless `v` is one.
  explicit JsonObject(JsonValue v);
  /// The document `root`, named `source` in messages.
  JsonObject(const Json& root, std::string source)
      : JsonObject(JsonValue(root, std::move(source), "")) {}

  const Json& json() const { return value_.json(); }
  /// The document's name in messages.
  const std::string& source() const { return value_.source(); }
  /// The member `key`, which must exist.
  JsonValue at(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, std::string_view problem) const;
  bool has(std::string_view key) const { return json().contains(key); }
  bool is_null(std::string_view key) const { return has(key) && json().at(key).is_null(); }

  /// Throws `<pointer>/<key>: unknown key (did you mean "x"?)`, or `(expected one of: ...)`
  /// when nothing is close, unless `key` is one of `known`.
  void check_key(std::string_view key, std::span<const std::string_view> known) const;

  std::optional<JsonValue> find(std::initializer_list<std::string_view> keys) const;
  std::optional<std::uint64_t> opt_uint(std::initializer_list<std::string_view> keys,
                                        bool allow_zero = false) const;
  std::uint64_t uint(std::initializer_list<std::string_view> keys, std::uint64_t fallback,
                     bool allow_zero = false) const;
  /// A positive integer; throws `<pointer>/<first key>: missing required key` when absent.
  std::uint64_t required(std::initializer_list<std::string_view> keys) const;
  bool boolean(std::initializer_list<std::string_view> keys, bool fallback) const;
  double probability(std::initializer_list<std::string_view> keys, double fallback) const;
  std::string string(std::initializer_list<std::string_view> keys, std::string fallback) const;
  /// A list of layer indices (Qwen2-MoE mlp_only_layers); empty when absent.
  std::vector<std::uint64_t> uint_list(std::string_view key) const;
  /// A list of names (bitsandbytes' llm_int8_skip_modules); empty when absent or null.
  std::vector<std::string> string_list(std::string_view key) const;

 private:
  JsonValue value_;
};

}  // namespace memest::detail
