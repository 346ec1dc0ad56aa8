// `fit --gpus`: the layouts of a number of GPUs that fit a budget (docs/parallelism.md). Each
// layout is estimated per device and per stage like any run; nothing about speed is modelled.
#include "parallel/layout.hpp"

#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/search.hpp>

#include <algorithm>
#include <array>

namespace memest {
namespace {

using u64 = std::uint64_t;

std::vector<u64> divisors_up_to(u64 n, u64 most) {
  std::vector<u64> out;
  for (u64 d = 1; d <= n && d <= most; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The parallel specs of `gpus` devices the model can take (check_layout accepts them).
std::vector<ParallelSpec> candidate_layouts(const RunSpec& run, u64 gpus) {
  constexpr u64 kNode = 8;  // tensor and context parallelism stay inside a node
  std::vector<ParallelSpec> out;
  for (u64 tp : divisors_up_to(gpus, kNode)) {
    if ((tp & (tp - 1)) != 0) continue;
    for (u64 pp : divisors_up_to(gpus / tp, gpus)) {
      for (u64 cp : divisors_up_to(gpus / tp / pp, kNode)) {
        if ((cp & (cp - 1)) != 0) continue;
        if (cp > 1 && run.training.attention == Attention::eager) continue;
        const u64 dp = gpus / tp / pp / cp;
        for (unsigned zero = 0; zero <= (dp > 1 ? 3U : 0U); ++zero) {
          ParallelSpec p = run.parallel;
          p.tensor = tp;
          p.sequence = run.parallel.sequence && tp > 1;
          p.pipeline = pp;
          p.virtual_stages = 1;
          p.microbatches = pp > 1 ? std::max(run.training.grad_accum, pp) : 0;
          p.context = cp;
          p.data_parallel = dp;
          p.zero_stage = zero;
          out.push_back(p);
        }
      }
    }
  }
  return out;
}

// The layout (one check_layout accepts) at the run's micro-batch, and the largest micro-batch
// it allows; nothing when it does not fit.
std::optional<LayoutFit> try_layout(const RunSpec& run, const Budget& budget, u64 max_batch,
                                    NeedCache& need_of) {
  try {
    const u64 need = need_of(run);
    if (need > budget.usable()) return std::nullopt;
    LayoutFit f{run.parallel, run.training.recompute, need, budget.usable() - need, 0};
    const FitResult best = fit_largest(run, budget, FitTarget::micro_batch, max_batch, need_of);
    f.largest_batch = best.best.value_or(0);
    return f;
  } catch (const Error&) {
    return std::nullopt;  // a size past 2^64
  }
}

}  // namespace

LayoutSearch fit_layouts(const RunSpec& run, const Budget& budget, u64 gpus, u64 max_batch) {
  LayoutSearch r;
  r.gpus = gpus;
  RunSpec point = run;
  if (point.training.micro_batch == 0) point.training.micro_batch = 1;
  if (point.training.seq_len == 0) point.training.seq_len = kFitDefaultSeq;
  NeedCache need;
  constexpr std::array<Recompute, 3> kRecompute = {Recompute::none, Recompute::selective,
                                                   Recompute::full};
  for (const ParallelSpec& p : candidate_layouts(run, gpus)) {
    for (Recompute rc : kRecompute) {
      point.parallel = p;
      point.training.recompute = rc;
      try {
        check_layout(point);
      } catch (const Error&) {
        continue;
      }
      ++r.tried;
      if (auto f = try_layout(point, budget, max_batch, need)) r.fits.push_back(*f);
    }
  }
  std::stable_sort(r.fits.begin(), r.fits.end(),
                   [](const LayoutFit& a, const LayoutFit& b) { return a.headroom > b.headroom; });
  return r;
}

}  // namespace memest
