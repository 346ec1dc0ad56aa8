// Renderers for the search commands: fit and sweep.
#include "report/json_dump.hpp"

#include <memest/gpu_support.hpp>
#include <memest/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memest {
namespace {

using nlohmann::ordered_json;

std::string_view target_name(FitTarget t) {
  return t == FitTarget::micro_batch ? "micro-batch" : "sequence length";
}

std::string_view target_key(FitTarget t) {
  return t == FitTarget::micro_batch ? "micro_batch" : "seq_len";
}

std::string other_dimension(const RunSpec& run, FitTarget t) {
  return t == FitTarget::micro_batch
             ? fmt::format("at sequence length {}",
                           run.training.seq_len ? run.training.seq_len : kFitDefaultSeq)
             : fmt::format("at micro-batch {}",
                           run.training.micro_batch ? run.training.micro_batch : 1);
}

// A need the search could not count is said as such, never as 2^64 - 1 bytes.
std::string past_need(const FitResult& fit, Unit unit) {
  return fit.past_best_beyond_limit ? "more than 2^64 bytes (past what memest counts)"
                                    : format_bytes(fit.need_past_best, unit);
}

// A margin in the table's unit, or to the byte when it would print as less than 0.01.
std::string margin(std::uint64_t bytes, Unit unit) {
  return bytes * 100 < unit_bytes(unit) ? format_bytes(bytes, Unit::bytes)
                                        : format_bytes(bytes, unit);
}

// The value of the target the user gave, answered beside the largest.
// --allocator cuda: a smaller size that needs more than the answer, and why.
std::string smaller_over_line(const FitResult& fit, FitTarget target, Unit unit) {
  if (!fit.smaller_over) return "";
  const SmallerOver& s = *fit.smaller_over;
  return fmt::format(
      "  {} {} needs {}, more than {} {}: the caching allocator's segments hold the tensors of "
      "each size differently (reserved bytes are not monotone; searched downward from the "
      "largest size whose live bytes fit)\n",
      target_name(target), s.value, s.need ? format_bytes(s.need, unit) : "more than 2^64 bytes",
      target_name(target), *fit.best);
}

std::string given_line(const FitResult& fit, FitTarget target, Unit unit) {
  if (!fit.given) return "";
  const std::uint64_t need = fit.need_at_given;
  return fmt::format("given {} {} ({}) needs {}, {}\n", target_name(target), *fit.given,
                     fit.given_where, format_bytes(need, unit),
                     need <= fit.usable ? "fits, headroom " + margin(fit.usable - need, unit)
                                        : "over by " + margin(need - fit.usable, unit));
}

}  // namespace

std::string render_fit_table(const RunSpec& run, const Budget& budget, FitTarget target,
                             const FitResult& fit, const std::vector<Remedy>& remedies, Unit unit) {
  std::string out =
      fmt::format("model      {}\nbudget     {} usable on {} ({} less {} reserved)\n",
                  run.model.name, format_bytes(budget.usable(), unit), budget_label(budget, unit),
                  format_bytes(budget.capacity, unit), format_bytes(budget.reserve, unit));
  for (const auto& w : fit.warnings) out += fmt::format("warning: {}\n", w);
  if (fit.best) {
    out += fmt::format("largest {} that fits {}: {}\n", target_name(target),
                       other_dimension(run, target), *fit.best);
    // The margin is said in words and to the byte when small: rounded figures alone could
    // make the size past the boundary look as if it fits.
    out += fmt::format("  {} {} needs {}, headroom {}\n", target_name(target), *fit.best,
                       format_bytes(fit.need_at_best, unit),
                       margin(fit.usable - fit.need_at_best, unit));
    if (*fit.best < fit.limit) {
      if (fit.past_best_beyond_limit) {
        out += fmt::format("  {} {} needs {}\n", target_name(target), *fit.best + 1,
                           past_need(fit, unit));
      } else {
        out += fmt::format("  {} {} needs {}, over by {}\n", target_name(target), *fit.best + 1,
                           format_bytes(fit.need_past_best, unit),
                           margin(fit.need_past_best - fit.usable, unit));
      }
    } else if (fit.limit_is_model) {
      out += fmt::format("  (the model's learned positions stop at {})\n", fit.limit);
    } else {
      out += fmt::format("  (the search stops at {})\n", fit.limit);
    }
    return out + smaller_over_line(fit, target, unit) + given_line(fit, target, unit);
  }
  out += fmt::format("nothing fits: {} 1 {} needs {}\n", target_name(target),
                     other_dimension(run, target), past_need(fit, unit));
  out += given_line(fit, target, unit);
  if (remedies.empty()) {
    out += "no single change memest knows saves memory here\n";
    return out;
  }
  out += "changes that save memory (what fits first: on the GPUs given, fewest changes first):\n";
  for (std::size_t i = 0; i < remedies.size() && i < kRemediesShown; ++i) {
    const Remedy& r = remedies[i];
    out += fmt::format("  {:<5} {:>14}  {}\n", r.fits ? "fits" : "over", format_bytes(r.need, unit),
                       r.change);
  }
  if (remedies.size() > kRemediesShown) {
    out += fmt::format("  ... {} more (--format json lists them all)\n",
                       remedies.size() - kRemediesShown);
  }
  return out;
}

std::string render_fit_json(const RunSpec& run, const Budget& budget, FitTarget target,
                            const FitResult& fit, const std::vector<Remedy>& remedies) {
  ordered_json rem = ordered_json::array();
  for (const auto& r : remedies) {
    rem.push_back({{"change", r.change},
                   {"changes", r.changes},
                   {"more_gpus", r.more_gpus},
                   {"need_bytes", r.need},
                   {"fits", r.fits}});
  }
  ordered_json j = {
      {"schema_version", kJsonSchemaVersion},
      {"model", run.model.name},
      {"target", target_key(target)},
      {"micro_batch", target == FitTarget::micro_batch ? ordered_json(nullptr)
                                                       : ordered_json(run.training.micro_batch)},
      {"seq_len",
       target == FitTarget::seq_len ? ordered_json(nullptr) : ordered_json(run.training.seq_len)},
      {"budget",
       {{"source", budget.source},
        {"capacity_bytes", budget.capacity},
        {"reserve_bytes", budget.reserve},
        {"usable_bytes", budget.usable()}}},
      {"best", fit.best ? ordered_json(*fit.best) : ordered_json(nullptr)},
      {"need_at_best_bytes", fit.best ? ordered_json(fit.need_at_best) : ordered_json(nullptr)},
      {"need_past_best_bytes",
       fit.need_past_best ? ordered_json(fit.need_past_best) : ordered_json(nullptr)},
      {"need_past_best_beyond_limit", fit.past_best_beyond_limit},
      {"limit", fit.limit},
      {"limit_is_model_positions", fit.limit_is_model},
      {"warnings", fit.warnings},
      {"smaller_over", fit.smaller_over ? ordered_json{{"value", fit.smaller_over->value},
                                                       {"need_bytes", fit.smaller_over->need}}
                                        : ordered_json(nullptr)},
      {"given", fit.given ? ordered_json{{"where", fit.given_where},
                                         {"value", *fit.given},
                                         {"need_bytes", fit.need_at_given},
                                         {"fits", fit.need_at_given <= fit.usable}}
                          : ordered_json(nullptr)},
      {"remedies", rem}};
  return detail::dump_json(j, 2) + "\n";
}

namespace {

using nlohmann::ordered_json;

constexpr const char* kSpeedNote =
    "memory only: speed is not modelled (pipeline bubbles, communication and recompute time "
    "decide which layout trains fastest)\n";

// What the user fixed of the layouts, as flags with their values.
std::vector<std::pair<std::string, std::string>> fixed_flags(const LayoutConstraints& c) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::pair<const char*, const std::optional<std::uint64_t>*> sizes[] = {
      {"--tp", &c.tensor}, {"--pp", &c.pipeline}, {"--cp", &c.context}, {"--dp", &c.data_parallel}};
  for (const auto& [flag, size] : sizes) {
    if (*size) out.emplace_back(flag, std::to_string(**size));
  }
  if (c.zero_stage) out.emplace_back("--zero", std::to_string(*c.zero_stage));
  if (c.recompute) out.emplace_back("--recompute", std::string(recompute_name(*c.recompute)));
  return out;
}

std::string fixed_line(const LayoutConstraints& c) {
  std::vector<std::string> items;
  for (const auto& [flag, value] : fixed_flags(c))
    items.push_back(fmt::format("{} {}", flag, value));
  if (items.empty()) return "";
  return fmt::format("fixed      {} (every layout keeps what was given)\n", fmt::join(items, ", "));
}

ordered_json fixed_json(const LayoutConstraints& c) {
  ordered_json j = ordered_json::object();
  for (const auto& [flag, value] : fixed_flags(c)) {
    const bool number = value.find_first_not_of("0123456789") == std::string::npos;
    j[flag.substr(2)] = number ? ordered_json(std::stoull(value)) : ordered_json(value);
  }
  return j;
}

std::string sharding_name(const ParallelSpec& p) {
  if (p.data_parallel <= 1 || p.zero_stage == 0) return "-";
  return fmt::format("ZeRO-{}", p.zero_stage);
}

// The tensor-parallel cell: its size, "+sp" with sequence parallelism.
std::string tensor_cell(const ParallelSpec& p) {
  return fmt::format("{}{}", p.tensor, p.sequence ? "+sp" : "");
}

// The schedule cell of a pipeline: the schedule's name, "/v" and the chunks per rank with more
// than one; "-" without a pipeline.
std::string schedule_cell(const ParallelSpec& p) {
  if (p.pipeline <= 1) return "-";
  const auto name = pipe_schedule_names()[static_cast<std::size_t>(p.schedule())];
  return p.virtual_stages > 1 ? fmt::format("{}/v{}", name, p.virtual_stages) : std::string(name);
}

}  // namespace

std::string render_layouts_table(const RunSpec& run, const Budget& budget,
                                 const LayoutSearch& search, Unit unit, std::size_t shown) {
  const bool seq = search.target == FitTarget::seq_len;
  std::string out = fmt::format(
      "model      {}\nbudget     {} usable per device on {}\n{}layouts    {} of {} tried on {} "
      "GPUs fit at micro-batch {}{}\n",
      run.model.name, format_bytes(budget.usable(), unit), budget_label(budget, unit),
      fixed_line(search.fixed), search.fits.size(), search.tried, search.gpus,
      run.training.micro_batch,
      seq ? fmt::format(" (longest sequence first; needs and headroom at sequence {})",
                        run.training.seq_len)
          : fmt::format(", sequence {} (most headroom first)", run.training.seq_len));
  if (search.fits.empty()) return out + "no layout of these GPUs fits\n" + kSpeedNote;
  // An expert-parallel column where a layout splits the experts.
  const bool ep = std::any_of(search.fits.begin(), search.fits.end(),
                              [](const LayoutFit& f) { return f.parallel.expert > 1; });
  const auto ep_cell = [&](const auto& v) { return ep ? fmt::format(" {:>3}", v) : ""; };
  // The tp column widens for "+sp" where a layout runs sequence parallelism.
  const bool sp = std::any_of(search.fits.begin(), search.fits.end(),
                              [](const LayoutFit& f) { return f.parallel.sequence; });
  const std::size_t tp_width = sp ? 6 : 3;
  // A schedule column where a layout runs a pipeline, as wide as its widest entry.
  std::size_t schedule_width = 0;
  for (const LayoutFit& f : search.fits)
    if (f.parallel.pipeline > 1)
      schedule_width = std::max({schedule_width, schedule_cell(f.parallel).size(), std::size_t{8}});
  const auto schedule_column = [&](const std::string& v) {
    return schedule_width > 0 ? fmt::format("  {:<{}}", v, schedule_width) : "";
  };
  out += fmt::format("  {:>{}} {:>3}{} {:>3}{} {:>4}  {:<7}  {:<9}  {:>16}  {:>16}  {:>9}\n", "tp",
                     tp_width, "pp", schedule_column("schedule"), "cp", ep_cell("ep"), "dp",
                     "shard", "recompute", "needs", "headroom", seq ? "max seq" : "max batch");
  for (std::size_t i = 0; i < search.fits.size() && i < shown; ++i) {
    const LayoutFit& f = search.fits[i];
    out += fmt::format("  {:>{}} {:>3}{} {:>3}{} {:>4}  {:<7}  {:<9}  {:>16}  {:>16}  {:>9}\n",
                       tensor_cell(f.parallel), tp_width, f.parallel.pipeline,
                       schedule_column(schedule_cell(f.parallel)), f.parallel.context,
                       ep_cell(f.parallel.expert), f.parallel.data_parallel,
                       sharding_name(f.parallel), recompute_name(f.recompute),
                       format_bytes(f.need, unit), format_bytes(f.headroom, unit), f.largest);
  }
  if (search.fits.size() > shown)
    out +=
        fmt::format("  ... {} more (--format json lists them all)\n", search.fits.size() - shown);
  return out + kSpeedNote;
}

std::string render_layouts_json(const RunSpec& run, const Budget& budget,
                                const LayoutSearch& search) {
  const char* largest_key =
      search.target == FitTarget::seq_len ? "largest_seq_len" : "largest_micro_batch";
  ordered_json list = ordered_json::array();
  for (const LayoutFit& f : search.fits) {
    list.push_back(
        {{"tensor_parallel", f.parallel.tensor},
         {"sequence_parallel", f.parallel.sequence},
         {"pipeline_parallel", f.parallel.pipeline},
         {"microbatches", f.parallel.microbatches},
         {"virtual_stages", f.parallel.pipeline > 1 ? f.parallel.virtual_stages : std::uint64_t{1}},
         {"context_parallel", f.parallel.context},
         {"expert_parallel", f.parallel.expert},
         {"schedule",
          f.parallel.pipeline > 1
              ? ordered_json(pipe_schedule_names()[static_cast<std::size_t>(f.parallel.schedule())])
              : ordered_json()},
         {"data_parallel", f.parallel.data_parallel},
         {"zero_stage", f.parallel.zero_stage},
         {"recompute", recompute_name(f.recompute)},
         {"need_bytes", f.need},
         {"headroom_bytes", f.headroom},
         {largest_key, f.largest}});
  }
  ordered_json j = {{"schema_version", kJsonSchemaVersion},
                    {"model", run.model.name},
                    {"gpus", search.gpus},
                    {"target", target_key(search.target)},
                    {"limit", search.limit},
                    {"fixed", fixed_json(search.fixed)},
                    {"micro_batch", run.training.micro_batch},
                    {"seq_len", run.training.seq_len},
                    {"usable_bytes", budget.usable()},
                    {"tried", search.tried},
                    {"speed_modelled", false},
                    {"layouts", list}};
  return detail::dump_json(j, 2) + "\n";
}

std::string render_sweep_csv_header() {
  return "micro_batch,seq_len,precision,optimizer,need_bytes,fits\n";
}

std::string render_sweep_csv_row(const SweepRow& r) {
  return fmt::format("{},{},{},{},{},{}\n", r.micro_batch, r.seq_len, r.precision,
                     optimizer_name(r.optimizer), r.need,
                     r.fits ? (*r.fits ? "true" : "false") : "");
}

std::string render_sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = render_sweep_csv_header();
  for (const auto& r : rows) out += render_sweep_csv_row(r);
  return out;
}

std::string render_sweep_jsonl_row(const SweepRow& r) {
  ordered_json j = {{"micro_batch", r.micro_batch},
                    {"seq_len", r.seq_len},
                    {"precision", r.precision},
                    {"optimizer", optimizer_name(r.optimizer)},
                    {"need_bytes", r.need},
                    {"fits", r.fits ? ordered_json(*r.fits) : ordered_json(nullptr)}};
  return detail::dump_json(j, -1) + "\n";
}

std::string render_sweep_jsonl(const std::vector<SweepRow>& rows) {
  std::string out;
  for (const auto& r : rows) out += render_sweep_jsonl_row(r);
  return out;
}

}  // namespace memest
