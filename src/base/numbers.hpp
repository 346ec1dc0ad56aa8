#pragma once

#include <string_view>

namespace memest {

/// Reads a whole text as a double in the C locale's form, whatever the process locale is; false
/// when it is not one (a leading space or '+', hexadecimal, trailing text). The web page's
/// libc++ has no floating-point from_chars, so every reader of a double comes here.
bool parse_double(std::string_view text, double& v);

}  // namespace memest
