#pragma once
// memest --from: how a format's reading sets run options from a file's keys. Each format
// (from_formats.hpp) reads the keys it knows through a FromMapper, which records every key it
// used (the JSON `from.used`) and, at the end, sorts the keys it did not use: those that cannot
// change memory are dropped, the rest listed as not modelled.

#include "input/from_tree.hpp"

#include <memest/run_options.hpp>

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// A key, a key with everything under it ("metric_logger" covers "metric_logger.log_dir"), or
/// with a leading "*." a last name anywhere ("*.lr").
struct KeyPattern {
  std::string_view pattern;
  std::string_view why;  ///< for a key not modelled: what it changes; empty for an ignored key
};

/// Whether `path` is matched by `p`.
bool key_matches(std::string_view path, std::string_view p);

/// Reads one FromTree into RunOptions.
class FromMapper {
 public:
  FromMapper(const FromTree& tree, FromFormat format, const RunOptions& flags);

  /// The leaf at `path` (nullptr when absent or null), marked as read.
  const FromValue* get(std::string_view path);
  /// Marks every leaf under `prefix` as read.
  void read_under(std::string_view prefix);
  /// Sets the valued option `flag` to `value`, as leaf `from` said.
  void set(std::string_view flag, const std::string& value, const FromValue& from);
  /// Sets the on/off option `flag`.
  void set(std::string_view flag, bool on, const FromValue& from);
  /// Lists `from` as changing memory in a way memest does not model.
  void not_modelled(const FromValue& from, std::string_view why);
  /// The run's own options (the flags given beside --from).
  [[nodiscard]] const RunOptions& flags() const { return flags_; }
  /// The file's name, for `where` strings of values the format implies.
  [[nodiscard]] const std::string& source() const { return tree_.source; }

  /// The options, with --stack set to the format's, and the report of the keys. Leaves no one
  /// read: dropped when `ignored` matches them, listed with the `why` of `known` that matches
  /// them, else listed as keys memest does not know.
  RunOptions finish(std::span<const KeyPattern> ignored, std::span<const KeyPattern> known);

 private:
  const FromTree& tree_;
  FromFormat format_;
  const RunOptions& flags_;
  RunOptions options_;
  std::vector<std::string> read_;
};

}  // namespace memest
