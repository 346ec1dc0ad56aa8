#pragma once

#include <memest/config.hpp>
#include <memest/estimate.hpp>
#include <memest/hardware.hpp>

#include <optional>
#include <string>
#include <vector>

namespace memest {

/// The verdict on one run config file.
enum class CheckStatus { fits, over, invalid };

/// The outcome of checking one run config against its budget.
struct CheckResult {
  std::string file;
  CheckStatus status = CheckStatus::invalid;
  std::vector<std::string> problems;  ///< why it is invalid: one complete message per problem
  std::optional<BudgetCheck> check;   ///< need vs usable, when valid
  std::optional<Budget> budget;
  bool activations_estimated = false;  ///< false: the need is a lower bound (no batch/seq)
};

/// Loads `path`, lays `overrides` (flags) over it, estimates, and compares what the run needs
/// with its budget. Never throws for a bad file: problems are returned as `invalid`.
CheckResult check_run_file(const std::string& path, const RunOptions& overrides);

/// The bytes a run needs on one device: the peak when modelled, else the sum of categories.
std::uint64_t bytes_needed(const Estimate& estimate);

/// bytes_needed(estimate(run)), for searches and sweeps that evaluate many runs.
std::uint64_t bytes_needed(const RunSpec& run);

}  // namespace memest
