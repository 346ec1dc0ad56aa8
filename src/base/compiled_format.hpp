// Private to the library: fmt::format with a format string compiled at build time (FMT_COMPILE),
// written into fmt's stack buffer: no parsing at run time and one allocation for the result
// (fmt::format(FMT_COMPILE(...)) alone grows its std::string a few times over).
#pragma once

#include <fmt/compile.h>
#include <fmt/format.h>

#include <string>

namespace memest::detail {

template <typename Format, typename... Args>
std::string compiled_format(const Format& format, const Args&... args) {
  fmt::memory_buffer out;
  fmt::format_to(fmt::appender(out), format, args...);
  return fmt::to_string(out);
}

}  // namespace memest::detail
