#include <memest/activation.hpp>
#include <memest/adapters.hpp>
#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/peak.hpp>
#include <memest/search.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {
namespace {

std::uint64_t& target_of(RunSpec& run, FitTarget t) {
  return t == FitTarget::micro_batch ? run.training.micro_batch : run.training.seq_len;
}

// Fills whichever of batch and seq is unset, so activations can be estimated.
void complete_training(RunSpec& run) {
  if (run.training.micro_batch == 0) run.training.micro_batch = 1;
  if (run.training.seq_len == 0) run.training.seq_len = kFitDefaultSeq;
}

}  // namespace

FitResult fit_largest(RunSpec run, const Budget& budget, FitTarget target, std::uint64_t limit) {
  complete_training(run);
  FitResult r;
  r.usable = budget.usable();
  r.limit = limit;
  // The model, precision and optimizer stay; only the searched size changes.
  const auto in = activation_inputs(run, false);
  std::optional<PeakPlan> plan;
  if (in) plan.emplace(run, *in);
  // The need at `value`; none past 2^64 bytes, the estimator's limit, which never fits.
  auto need = [&](std::uint64_t value) -> std::optional<std::uint64_t> {
    target_of(run, target) = value;
    ++r.evaluations;
    try {
      return plan ? plan->needed(run.training.micro_batch, run.training.seq_len)
                  : bytes_needed(run);
    } catch (const SizeOverflow&) {
      return std::nullopt;
    }
  };
  const auto fits = [&](const std::optional<std::uint64_t>& n) { return n && *n <= r.usable; };
  const auto past = [&](const std::optional<std::uint64_t>& n) {
    r.need_past_best = n.value_or(0);
    r.past_best_beyond_limit = !n;
  };
  const auto at_one = need(1);
  if (!fits(at_one)) {
    past(at_one);
    return r;
  }
  // Doubling finds a value that does not fit (or the limit), bisection the boundary below it.
  std::uint64_t lo = 1, lo_need = *at_one, hi = 0;
  std::optional<std::uint64_t> hi_need;
  while (hi == 0) {
    const std::uint64_t next = lo > limit / 2 ? limit : lo * 2;
    if (next == lo) break;
    const auto n = need(next);
    if (fits(n)) {
      lo = next;
      lo_need = *n;
    } else {
      hi = next;
      hi_need = n;
    }
  }
  while (hi != 0 && hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    const auto n = need(mid);
    if (fits(n)) {
      lo = mid;
      lo_need = *n;
    } else {
      hi = mid;
      hi_need = n;
    }
  }
  r.best = lo;
  r.need_at_best = lo_need;
  if (hi != 0) past(hi_need);
  return r;
}

std::vector<Remedy> remedies(const RunSpec& run, const Budget& budget) {
  std::vector<Remedy> out;
  const std::uint64_t before = bytes_needed(run);
  auto consider = [&](std::string change, RunSpec changed) {
    try {
      const std::uint64_t n = bytes_needed(changed);
      if (n < before)
        out.push_back({std::move(change), std::move(changed), n, n <= budget.usable()});
    } catch (const Error&) {
      // a change this model cannot take (e.g. LoRA without an architecture) is no remedy
    }
  };
  for (const char* policy : {"bf16", "mixed-bf16", "amp-bf16"}) {
    if (run.precision.name == policy) continue;
    RunSpec r = run;
    r.precision = precision_preset(policy);
    consider(fmt::format("precision {} (--precision {})", policy, policy), r);
  }
  if (run.optimizer.kind == OptimizerKind::adam || run.optimizer.kind == OptimizerKind::adamw) {
    RunSpec r = run;
    r.optimizer = OptimizerSpec{};
    r.optimizer.kind = OptimizerKind::adam8bit;
    consider("8-bit Adam states (--optimizer adam8bit)", r);
  }
  if (run.parallel.data_parallel > 1) {
    for (unsigned stage = run.parallel.zero_stage + 1; stage <= 3; ++stage) {
      RunSpec r = run;
      r.parallel.zero_stage = stage;
      consider(fmt::format("ZeRO stage {} over the {} data-parallel ranks (--zero {})", stage,
                           run.parallel.data_parallel, stage),
               r);
    }
  }
  if (!run.parallel.offload_optimizer && run.precision.master) {
    RunSpec r = run;
    r.parallel.offload_optimizer = true;
    consider("master weights and optimizer states in host memory (--offload optimizer)", r);
  }
  const bool has_batch = run.training.micro_batch > 0 && run.training.seq_len > 0;
  if (has_batch && run.training.recompute != Recompute::full) {
    RunSpec r = run;
    r.training.recompute = Recompute::full;
    consider("full activation recompute (--recompute full)", r);
  }
  if (has_batch && run.training.attention == Attention::eager) {
    RunSpec r = run;
    r.training.attention = Attention::flash;
    consider("flash attention (--attention flash)", r);
  }
  if (has_batch && run.training.micro_batch > 1) {
    RunSpec r = run;
    r.training.micro_batch = run.training.micro_batch / 2;
    r.training.grad_accum = run.training.grad_accum * 2;
    consider(
        fmt::format("half the micro-batch, twice the accumulation (--batch {} --grad-accum {})",
                    r.training.micro_batch, r.training.grad_accum),
        r);
  }
  const bool base_trains =
      trainable_count(run.model.inventory) == parameter_count(run.model.inventory);
  if (run.model.arch && base_trains) {
    for (bool q : {false, true}) {
      RunSpec r = run;
      apply_lora(r.model, LoraSpec{16, {"all-linear"}, q, q});
      consider(q ? "QLoRA: nf4 base, rank-16 adapters (--lora-rank 16 --lora-targets all-linear "
                   "--qlora --double-quant)"
                 : "LoRA: frozen base, rank-16 adapters (--lora-rank 16 --lora-targets all-linear)",
               r);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Remedy& a, const Remedy& b) { return a.need < b.need; });
  return out;
}

std::uint64_t sweep_size(const SweepGrid& grid) {
  const auto n = [](std::size_t size) { return std::max<std::uint64_t>(size, 1); };
  const std::uint64_t sizes[] = {n(grid.micro_batches.size()), n(grid.seq_lens.size()),
                                 n(grid.policies.size()), n(grid.optimizers.size())};
  std::uint64_t rows = 1;
  bool over = false;
  for (const std::uint64_t k : sizes) over = over || __builtin_mul_overflow(rows, k, &rows);
  if (over || rows > kMaxSweepRows) {
    throw Error(fmt::format(
        "sweep: {} batches x {} sequence lengths x {} policies x {} optimizers is {} rows, more "
        "than the {} one sweep computes (split the lists over several sweeps)",
        sizes[0], sizes[1], sizes[2], sizes[3],
        over ? std::string("past 2^64") : fmt::format("{}", rows), kMaxSweepRows));
  }
  return rows;
}

std::vector<SweepRow> sweep(const RunSpec& run, const SweepGrid& grid,
                            const std::optional<Budget>& budget) {
  std::vector<SweepRow> rows;
  rows.reserve(sweep_size(grid));
  sweep(run, grid, budget, [&](const SweepRow& row) { rows.push_back(row); });
  return rows;
}

void sweep(const RunSpec& run, const SweepGrid& grid, const std::optional<Budget>& budget,
           const std::function<void(const SweepRow&)>& emit) {
  sweep_size(grid);
  const auto batches =
      grid.micro_batches.empty() ? std::vector{run.training.micro_batch} : grid.micro_batches;
  const auto seqs = grid.seq_lens.empty() ? std::vector{run.training.seq_len} : grid.seq_lens;
  const auto policies = grid.policies.empty() ? std::vector{run.precision} : grid.policies;
  const auto optimizers =
      grid.optimizers.empty() ? std::vector{run.optimizer.kind} : grid.optimizers;
  // One plan per (policy, optimizer): what does not depend on the batch and sequence is
  // computed once, not for every point; the optimizers of one policy share its walk.
  const auto spec_of = [&](OptimizerKind o) {
    if (o == run.optimizer.kind) return run.optimizer;
    OptimizerSpec spec;
    spec.kind = o;
    return spec;
  };
  std::vector<std::optional<PeakPlan>> plans;
  plans.reserve(policies.size() * optimizers.size());
  RunSpec point = run;
  for (const auto& p : policies) {
    point.precision = p;
    point.optimizer = spec_of(optimizers.front());
    point.training.micro_batch = batches.front() ? batches.front() : 1;
    point.training.seq_len = seqs.front() ? seqs.front() : 1;
    const auto in = activation_inputs(point, false);
    std::optional<PeakPlan> base;
    if (in) base.emplace(point, *in);
    const std::size_t first = plans.size();
    for (std::size_t k = 0; k < optimizers.size(); ++k) {
      auto& plan = plans.emplace_back();
      if (base && k > 0) plan.emplace(base->with_optimizer(spec_of(optimizers[k])));
    }
    plans[first] = std::move(base);
  }
  for (auto b : batches) {
    for (auto s : seqs) {
      std::size_t i = 0;
      for (const auto& p : policies) {
        for (auto o : optimizers) {
          std::uint64_t need = 0;
          if (plans[i] && b > 0 && s > 0) {
            need = plans[i]->needed(b, s);
          } else {
            point.training.micro_batch = b;
            point.training.seq_len = s;
            point.precision = p;
            point.optimizer = spec_of(o);
            need = bytes_needed(point);
          }
          ++i;
          SweepRow row{b, s, p.name, o, need, std::nullopt};
          if (budget) row.fits = row.need <= budget->usable();
          emit(row);
        }
      }
    }
  }
}

}  // namespace memest
