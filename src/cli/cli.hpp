#pragma once

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

/// The same; `plain_path` false sends even a plain estimate through CLI11 instead of the short
/// path for `--name value` arguments, so tests can check that both give the same answer.
int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, bool plain_path);

}  // namespace memest::cli
