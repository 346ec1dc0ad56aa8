#pragma once

#include <memest/check.hpp>
#include <memest/estimate.hpp>
#include <memest/hardware.hpp>
#include <memest/hf_config.hpp>
#include <memest/search.hpp>
#include <memest/units.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// How a report is printed.
struct ReportOptions {
  Unit unit = Unit::GB;  ///< unit of the human table; JSON always carries exact bytes
  bool explain = false;  ///< the table adds the parameter inventory and the formulas behind figures
  bool color = false;    ///< ANSI colours in the chart (a terminal, NO_COLOR unset)
};

/// Version of the JSON layout; bumped when a key changes meaning or disappears. 2: an estimate's
/// `inputs` is a run config (run_config_of) and what it held before is under `run`.
inline constexpr int kJsonSchemaVersion = 2;

/// The library's version, e.g. "0.1.0".
std::string_view version();

/// A human table: one row per category with dtype, bytes per element, size and basis, then the
/// total and the assumptions. Ends with a newline.
std::string render_table(const RunSpec& run, const Estimate& est, const ReportOptions& options);

/// JSON with stable snake_case keys, integer byte counts and `schema_version`: `inputs` is
/// `run_config` (JSON text: the run config that reproduces the run, run_config_of in
/// run_config.hpp), `run` the run as resolved (the model's name and source, the precision
/// policy's dtypes, ...). Categories not estimated have `"bytes": null`. Ends with a newline.
std::string render_json(const RunSpec& run, const Estimate& est, const ReportOptions& options,
                        std::string_view run_config);

/// A stacked bar of the device categories, against the budget when there is one, with a legend:
/// Unicode blocks, coloured when options.color. Ends with a newline.
std::string render_bar(const Estimate& est, const std::optional<Budget>& budget,
                       const ReportOptions& options);

/// Live memory over the training step as an SVG picture (--plot): Peak::timeline stacked by
/// part, the peak marked, the budget as a line when there is one. Needs est.peak with a
/// timeline (estimate(run, {.timeline = true})); throws Error without one.
std::string render_step_svg(const RunSpec& run, const Estimate& est, const ReportOptions& options);

/// What a sweep needs against the micro-batch (or, when only sequences vary, the sequence
/// length) as an SVG picture (sweep --plot): one line per policy, optimizer and other size,
/// the budget as a line. Throws Error when neither size takes two values.
std::string render_sweep_svg(const RunSpec& run, const std::vector<SweepRow>& rows,
                             const ReportOptions& options);

/// The breakdown as a Markdown table, for pasting into a pull request.
std::string render_markdown(const RunSpec& run, const Estimate& est, const ReportOptions& options);

/// The model presets as a table: name, family, parameters, active parameters.
std::string render_models_table(const std::vector<PresetInfo>& presets);
/// The model presets as JSON: {"schema_version", "models": [{name, family, params,
/// active_params}]}.
std::string render_models_json(const std::vector<PresetInfo>& presets);

/// The GPU presets as a table: name, capacity in `unit` and GiB, source, label.
std::string render_gpus_table(const std::vector<Gpu>& gpus, Unit unit);
/// The GPU presets as JSON: {"schema_version", "default_reserve_bytes", "gpus": [...]}.
std::string render_gpus_json(const std::vector<Gpu>& gpus);

/// One line per checked file: "fits, headroom X", "over by X" or "invalid: reason" (one line
/// per problem), then a summary line.
std::string render_check_table(const std::vector<CheckResult>& results, Unit unit);
/// The check results as JSON with exact bytes and a summary of counts per status.
std::string render_check_json(const std::vector<CheckResult>& results);

/// The same run under several policies, side by side: one column per estimate, one row per
/// category, the total and its difference from the first column.
std::string render_compare_table(const std::vector<RunSpec>& runs,
                                 const std::vector<Estimate>& estimates, Unit unit);
/// The comparison as a Markdown table, the same rows and notes as the table.
std::string render_compare_markdown(const std::vector<RunSpec>& runs,
                                    const std::vector<Estimate>& estimates, Unit unit);
/// The comparison as JSON: one entry per policy with its categories' bytes and total.
std::string render_compare_json(const std::vector<RunSpec>& runs,
                                const std::vector<Estimate>& estimates);

/// The answer of `fit`: the largest value that fits with the need on both sides of the boundary,
/// or, when nothing fits, the changes that would help, smallest need first.
std::string render_fit_table(const RunSpec& run, const Budget& budget, FitTarget target,
                             const FitResult& fit, const std::vector<Remedy>& remedies, Unit unit);
/// The same as JSON.
std::string render_fit_json(const RunSpec& run, const Budget& budget, FitTarget target,
                            const FitResult& fit, const std::vector<Remedy>& remedies);

/// The layouts of `fit --gpus` that fit, most headroom first (at most `shown` rows), with a
/// plain statement that speed is not modelled.
std::string render_layouts_table(const RunSpec& run, const Budget& budget,
                                 const LayoutSearch& search, Unit unit, std::size_t shown = 20);
/// The same as JSON (every layout that fits).
std::string render_layouts_json(const RunSpec& run, const Budget& budget,
                                const LayoutSearch& search);

/// Sweep rows as CSV with a header line (bytes as integers).
std::string render_sweep_csv(const std::vector<SweepRow>& rows);
/// The header line of render_sweep_csv, for a caller that prints rows as they come.
std::string render_sweep_csv_header();
/// One line of render_sweep_csv.
std::string render_sweep_csv_row(const SweepRow& row);
/// Sweep rows as JSON lines, one object per row.
std::string render_sweep_jsonl(const std::vector<SweepRow>& rows);
/// One line of render_sweep_jsonl.
std::string render_sweep_jsonl_row(const SweepRow& row);

}  // namespace memest
