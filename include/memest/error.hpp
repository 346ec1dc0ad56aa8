#pragma once

#include <stdexcept>
#include <string>

namespace memest {

/// The one exception type of the library. Its message is complete, one line, and safe to show a
/// user: `<where>: <problem> (expected ...)`. The CLI prefixes `memest: error: ` and exits 2.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The Error for a size past 2^64 (checked_mul and checked_add throw it), so that a loader can
/// say which file's sizes overflowed.
class SizeOverflow : public Error {
 public:
  using Error::Error;
};

/// Rethrows the Error in flight with `context + ": "` in front of its message. Use inside a
/// catch block to add the flag, file or JSON pointer a low-level parser does not know.
[[noreturn]] void rethrow_with_context(const Error& e, const std::string& context);

}  // namespace memest
