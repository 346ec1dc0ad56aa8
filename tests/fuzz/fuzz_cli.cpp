// libFuzzer target: the whole command line in-process, one argument per line of the input.
// The CLI must answer every argv with exit 0, 1 or 2 (3 is an internal error: a finding), and an
// error as lines that start with "memest: error: ".
#include "cli/cli.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {"memest"};
  for (std::size_t start = 0; start <= text.size() && args.size() < 64;) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
  if (code < 0 || code > 2) std::abort();
  if (code == 2 && err.str().rfind("memest: error: ", 0) != 0) std::abort();
  return 0;
}
