#include "parallel/layout.hpp"

#include <memest/activation.hpp>
#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/peak.hpp>
#include <memest/run_config.hpp>

#include <algorithm>
#include <optional>
#include <sstream>

namespace memest {

std::uint64_t bytes_needed(const Estimate& estimate) { return estimate.needed(); }

namespace {

// Everything but the micro-batch, the sequence length and the budget: what a compiled plan of
// the step depends on.
bool same_step(const RunSpec& a, const RunSpec& b) {
  TrainingSpec ta = a.training, tb = b.training;
  ta.micro_batch = tb.micro_batch = 0;
  ta.seq_len = tb.seq_len = 0;
  return ta == tb && a.model == b.model && a.precision == b.precision &&
         a.optimizer == b.optimizer && a.parallel == b.parallel && a.rank == b.rank;
}

}  // namespace

std::uint64_t NeedCache::operator()(const RunSpec& run) {
  if (run.training.micro_batch == 0 || run.training.seq_len == 0)
    return bytes_needed(estimate(run));
  if (!run_ || !same_step(*run_, run)) {
    run_.reset();
    plans_.clear();
    for (const RunSpec& r : stage_runs(run))
      plans_.emplace_back(r, *activation_inputs(r, Notes::skipped));
    run_ = run;
  }
  std::uint64_t needed = 0;
  for (const PeakPlan& p : plans_)
    needed = std::max(needed, p.needed(run.training.micro_batch, run.training.seq_len));
  return needed;
}

std::uint64_t bytes_needed(const RunSpec& run) { return NeedCache{}(run); }

CheckResult check_run_file(const std::string& path, const RunOptions& overrides) {
  CheckResult result;
  result.file = path;
  try {
    RunOptions options = load_run_config(path);
    merge(options, overrides);
    const RunSpec run = resolve(options);
    if (!run.budget) {
      throw Error(path +
                  ": /hardware: no budget: set hardware.gpu (see 'memest gpus') or "
                  "hardware.budget");
    }
    const Estimate est = estimate(run);
    result.budget = run.budget;
    result.check = est.budget;
    result.activations_estimated = est.at("activations").bytes.has_value();
    result.status = result.check->fits ? CheckStatus::fits : CheckStatus::over;
  } catch (const Error& e) {
    std::istringstream lines(e.what());
    for (std::string line; std::getline(lines, line);) result.problems.push_back(line);
    result.status = CheckStatus::invalid;
  }
  return result;
}

}  // namespace memest
