// libFuzzer target: the whole command line in-process, one argument per line of the input.
// The CLI must answer every argv with exit 0, 1 or 2 (3 is an internal error: a finding), explain
// an exit 2, and give the same answer whether or not a plain estimate takes the short path.
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
  // --plot writes a file wherever its argument says: not fuzzed (tests/python/test_plot.py).
  if (text.find("--plot") != std::string_view::npos) return 0;
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
  // The short path for plain `--name value` estimates answers as CLI11 does.
  std::ostringstream out11, err11;
  const int code11 = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out11, err11,
                                      memest::cli::Parser::cli11_only);
  if (code11 != code || out11.str() != out.str() || err11.str() != err.str()) std::abort();
  // Every line on stderr is memest's; exit 2 is explained there, or per file by `check`.
  std::istringstream lines(err.str());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("memest: ", 0) != 0) std::abort();
  }
  if (code == 2 && err.str().empty() && out.str().find("invalid") == std::string::npos) {
    std::abort();
  }
  return 0;
}
