#include <memest/activation.hpp>
#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/peak.hpp>
#include <memest/run_config.hpp>

#include <sstream>

namespace memest {

std::uint64_t bytes_needed(const Estimate& estimate) {
  return estimate.peak ? estimate.peak->needed : estimate.total_bytes;
}

std::uint64_t bytes_needed(const RunSpec& run) {
  // The numeric core only: no categories, strings or report.
  if (const auto in = activation_inputs(run, false)) {
    return estimate_step(run, *in, false, false).peak.needed;
  }
  return bytes_needed(estimate(run));
}

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
    result.check = check_budget(bytes_needed(est), *run.budget);
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
