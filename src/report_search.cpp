// Renderers for the search commands: fit and sweep.
#include "json_dump.hpp"

#include <memest/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

}  // namespace

std::string render_fit_table(const RunSpec& run, const Budget& budget, FitTarget target,
                             const FitResult& fit, const std::vector<Remedy>& remedies, Unit unit) {
  std::string out =
      fmt::format("model      {}\nbudget     {} usable on {} ({} less {} reserved)\n",
                  run.model.name, format_bytes(budget.usable(), unit), budget_label(budget, unit),
                  format_bytes(budget.capacity, unit), format_bytes(budget.reserve, unit));
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
    return out;
  }
  out += fmt::format("nothing fits: {} 1 {} needs {}\n", target_name(target),
                     other_dimension(run, target), past_need(fit, unit));
  if (remedies.empty()) {
    out += "no single change memest knows saves memory here\n";
    return out;
  }
  out += "changes that save memory (what fits first, fewest changes first):\n";
  for (const auto& r : remedies) {
    out += fmt::format("  {:<5} {:>14}  {}\n", r.fits ? "fits" : "over", format_bytes(r.need, unit),
                       r.change);
  }
  return out;
}

std::string render_fit_json(const RunSpec& run, const Budget& budget, FitTarget target,
                            const FitResult& fit, const std::vector<Remedy>& remedies) {
  ordered_json rem = ordered_json::array();
  for (const auto& r : remedies) {
    rem.push_back(
        {{"change", r.change}, {"changes", r.changes}, {"need_bytes", r.need}, {"fits", r.fits}});
  }
  ordered_json j = {
      {"schema_version", kJsonSchemaVersion},
      {"model", run.model.name},
      {"target", target_key(target)},
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
      {"remedies", rem}};
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
