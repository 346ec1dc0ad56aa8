#pragma once

#include <cstdint>
#include <ostream>
#include <span>
#include <string>

namespace memest::cli {

/// Exit codes of the command line tool (README, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;   ///< a budget check failed, nothing fits
inline constexpr int kExitInvalidInput = 2;  ///< bad flag, file, key or value
inline constexpr int kExitBug = 3;           ///< an internal error: please report

/// Runs memest with these arguments, printing to `out` and `err`; returns the exit code.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

/// The same with the arguments as strings, "memest" first (what the Python module, the web
/// page and the tests pass).
int run(std::span<const std::string> words, std::ostream& out, std::ostream& err);

/// Which parser reads the arguments: the short path for a plain estimate's `--name value`
/// arguments (handing anything else to CLI11), or CLI11 for everything, so tests can check that
/// both give the same answer.
enum class Parser : std::uint8_t { plain_first, cli11_only };

/// The same, with the arguments read by `parser`.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, Parser parser);

}  // namespace memest::cli
