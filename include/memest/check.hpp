#pragma once

#include <memest/config.hpp>
#include <memest/estimate.hpp>
#include <memest/hardware.hpp>
#include <memest/peak.hpp>
#include <memest/run_spec.hpp>

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

/// bytes_needed(estimate(run)) from the numeric core alone: the step of each device compiled
/// and evaluated at the run's micro-batch and sequence length, no report strings built.
std::uint64_t bytes_needed(const RunSpec& run);

/// bytes_needed(run) for a caller that asks about one run at many sizes (a search, a sweep),
/// which holds it: the step of each device (one per pipeline stage) is compiled at the first
/// call and kept while the runs asked about differ from it only in the micro-batch and the
/// sequence length, so the splits are checked at the first call's sizes.
class NeedCache {
 public:
  /// The bytes `run` needs on one device, as bytes_needed(run).
  std::uint64_t operator()(const RunSpec& run);

 private:
  std::optional<RunSpec> run_;   // the run the plans were compiled for
  std::vector<PeakPlan> plans_;  // one per pipeline stage
};

}  // namespace memest
