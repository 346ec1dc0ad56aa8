#include "model/adapters.hpp"
#include "parallel/layout.hpp"

#include <memest/activation.hpp>
#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/gpu_support.hpp>
#include <memest/peak.hpp>
#include <memest/search.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// The largest value in [1, r.limit] whose need fits r.usable, the need growing with the value:
// doubling from 1 finds a value that does not fit (or the limit), bisection the boundary below
// it. `need(value)` is none past 2^64 bytes, which never fits.
template <typename Need>
void search_largest(Need&& need, FitResult& r) {
  const std::uint64_t limit = r.limit;
  const auto fits = [&](const std::optional<std::uint64_t>& n) { return n && *n <= r.usable; };
  const auto past = [&](const std::optional<std::uint64_t>& n) {
    r.need_past_best = n.value_or(0);
    r.past_best_beyond_limit = !n;
  };
  const auto at_one = need(1);
  if (!fits(at_one)) {
    past(at_one);
    return;
  }
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
}

}  // namespace

FitResult fit_largest(RunSpec run, const Budget& budget, FitTarget target, std::uint64_t limit) {
  NeedCache need;
  return fit_largest(std::move(run), budget, target, limit, need);
}

namespace {

// A run's need at each value of the searched size, counted in `r.evaluations`: its plan's when
// the step is one plan, the cache's (a plan per stage) when it is split.
class NeedAt {
 public:
  NeedAt(RunSpec run, FitTarget target, NeedCache& cache, FitResult& r)
      : run_(std::move(run)), target_(target), cache_(cache), r_(r) {
    const auto in = activation_inputs(run_, Notes::skipped);
    if (in && !run_.parallel.splits_model()) plan_.emplace(run_, *in);
  }
  std::optional<std::uint64_t> operator()(std::uint64_t value) {
    target_of(run_, target_) = value;
    ++r_.evaluations;
    try {
      return plan_ ? plan_->needed(run_.training.micro_batch, run_.training.seq_len) : cache_(run_);
    } catch (const SizeOverflow&) {
      return std::nullopt;
    }
  }

 private:
  RunSpec run_;
  FitTarget target_;
  NeedCache& cache_;
  FitResult& r_;
  std::optional<PeakPlan> plan_;  // a split run has a plan per stage, in `cache_`
};

// The most values the allocator's search tries one by one below the live bytes' bound.
constexpr std::uint64_t kAllocatorScan = 64;

// --allocator cuda: the caching allocator's reserved bytes are not monotone in the size (a
// tensor that passes 10 MiB leaves the shared 20 MiB segments, docs/activations.md), so a
// bisection could stop at a size that does not fit below one that does. The live bytes are a
// monotone lower bound of reserved: the largest size they fit bounds the answer, and the sizes
// below it are tried downward (bisection past kAllocatorScan of them). Size 1 is asked too, so
// that fit can say when a smaller size needs more.
void search_largest_replayed(NeedAt& replayed, NeedAt& live, FitResult& r) {
  search_largest(live, r);
  if (!r.best) {
    r.need_past_best = replayed(1).value_or(0);
    return;
  }
  const std::uint64_t bound = *r.best;
  std::optional<std::uint64_t> above = bound < r.limit ? replayed(bound + 1) : std::nullopt;
  r.best.reset();
  for (std::uint64_t v = bound; v >= 1 && bound - v < kAllocatorScan; --v) {
    const auto n = replayed(v);
    if (n && *n <= r.usable) {
      r.best = v;
      r.need_at_best = *n;
      r.need_past_best = v < r.limit ? above.value_or(0) : 0;
      r.past_best_beyond_limit = v < r.limit && !above;
      break;
    }
    above = n;
  }
  if (!r.best && bound > kAllocatorScan) {
    FitResult below = r;
    below.limit = bound - kAllocatorScan;
    search_largest(replayed, below);
    below.limit = r.limit;
    below.evaluations = r.evaluations;  // counted on `r` by the NeedAt
    r = below;
  }
  if (!r.best) {
    r.need_past_best = replayed(1).value_or(0);
    return;
  }
  if (*r.best > 1) {
    const auto at_one = replayed(1);
    if (!at_one || *at_one > r.usable) r.smaller_over = SmallerOver{1, at_one.value_or(0)};
  }
}

}  // namespace

FitResult fit_largest(RunSpec run, const Budget& budget, FitTarget target, std::uint64_t limit,
                      NeedCache& need) {
  complete_training(run);
  run.budget = budget;  // the replayed allocator's device is the budget searched against
  FitResult r;
  r.usable = budget.usable();
  // A learned position table has no row past its length: the sequence stops there.
  const auto& arch = run.model.arch;
  if (target == FitTarget::seq_len && arch && arch->max_seq_len > 0 && arch->max_seq_len <= limit) {
    limit = arch->max_seq_len;
    r.limit_is_model = true;
  }
  r.limit = limit;
  // The model, precision and optimizer stay; only the searched size changes.
  NeedAt need_at(run, target, need, r);
  if (run.training.allocator != Allocator::cuda) {
    search_largest(need_at, r);
    return r;
  }
  RunSpec live_run = run;
  live_run.training.allocator = Allocator::none;
  NeedCache live_cache;
  NeedAt live(live_run, target, live_cache, r);
  search_largest_replayed(need_at, live, r);
  return r;
}

namespace {

// One change a remedy can make. Changes of the same group exclude each other (two precisions,
// LoRA and QLoRA, two GPU counts).
struct Move {
  std::string change;
  int group = 0;
  std::function<void(RunSpec&)> apply;
  bool more_gpus = false;
};

enum Group : int {
  kPrecision,
  kOptimizer,
  kImpl,
  kPaged,
  kParallel,
  kOffload,
  kRecompute,
  kAttention,
  kBatch,
  kAdapters
};

// The fp16 twin of a bf16 precision preset, for a GPU without bf16.
std::string_view fp16_twin(std::string_view policy) {
  if (policy == "bf16") return "fp16";
  if (policy == "mixed-bf16") return "mixed";
  if (policy == "amp-bf16") return "amp";
  if (policy == "mixed-bf16-fp32grad") return "mixed-fp32grad";
  return "";
}

// Every `from` dtype of a policy made `to`.
void replace_dtype(PrecisionPolicy& p, std::initializer_list<Dtype> from, Dtype to) {
  const auto swap = [&](Dtype& d) {
    if (std::find(from.begin(), from.end(), d) != from.end()) d = to;
  };
  for (Dtype* d : {&p.param, &p.grad, &p.state, &p.activation}) swap(*d);
  for (auto* d : {&p.working, &p.master, &p.grad_accum}) {
    if (*d) swap(**d);
  }
}

// The changes a run needs before it runs on the budget's GPU at all (bf16 or fp8 the GPU lacks,
// FlashAttention before sm 80): every remedy makes them too.
std::vector<Move> runnable_moves(const RunSpec& run, const Budget& budget) {
  std::vector<Move> out;
  const Gpu* gpu = budget_gpu(budget);
  if (!gpu || unsupported_features(run, budget).empty()) return out;
  const std::string_view twin = fp16_twin(run.precision.name);
  if (!gpu_support(*gpu).bf16) {
    RunSpec probe = run;
    probe.training.attention = Attention::sdpa;
    replace_dtype(probe.precision, {Dtype::fp8_e4m3, Dtype::fp8_e5m2}, Dtype::fp16);
    if (!unsupported_features(probe, budget).empty()) {
      out.push_back({twin.empty() ? fmt::format("fp16 for bf16, which {} lacks", gpu->name)
                                  : fmt::format("fp16 for bf16, which {} lacks (--precision {})",
                                                gpu->name, twin),
                     kPrecision, [twin](RunSpec& r) {
                       if (!twin.empty()) r.precision = precision_preset(twin);
                       replace_dtype(r.precision, {Dtype::bf16}, Dtype::fp16);
                     }});
    }
  }
  if (!gpu_support(*gpu).fp8) {
    const Dtype to = gpu_support(*gpu).bf16 ? Dtype::bf16 : Dtype::fp16;
    RunSpec probe = run;
    replace_dtype(probe.precision, {Dtype::fp8_e4m3, Dtype::fp8_e5m2}, to);
    if (!(probe.precision == run.precision)) {
      out.push_back({fmt::format("{} for fp8, which {} lacks", dtype_name(to), gpu->name), kImpl,
                     [to](RunSpec& r) {
                       replace_dtype(r.precision, {Dtype::fp8_e4m3, Dtype::fp8_e5m2}, to);
                     }});
    }
  }
  if (!gpu_support(*gpu).flash_attention && run.training.attention == Attention::flash) {
    out.push_back({fmt::format("PyTorch's memory-efficient attention for FlashAttention, which {} "
                               "lacks (--attention sdpa)",
                               gpu->name),
                   kAttention, [](RunSpec& r) { r.training.attention = Attention::sdpa; }});
  }
  return out;
}

void precision_moves(const RunSpec& run, const Gpu* gpu, std::vector<Move>& out) {
  const bool bf16 = !gpu || gpu_support(*gpu).bf16;
  for (const char* bf : {"bf16", "mixed-bf16", "amp-bf16"}) {
    const std::string policy(bf16 ? std::string_view(bf) : fp16_twin(bf));
    if (run.precision.name == policy) continue;
    out.push_back({fmt::format("precision {} (--precision {})", policy, policy), kPrecision,
                   [policy](RunSpec& r) { r.precision = precision_preset(policy); }});
  }
  const auto kind = run.optimizer.kind;
  if (kind == OptimizerKind::adam || kind == OptimizerKind::adamw) {
    out.push_back({"8-bit Adam states (--optimizer adam8bit)", kOptimizer, [](RunSpec& r) {
                     r.optimizer = OptimizerSpec{};
                     r.optimizer.kind = OptimizerKind::adam8bit;
                   }});
  }
  const bool pages = kind == OptimizerKind::adam || kind == OptimizerKind::adamw ||
                     kind == OptimizerKind::adam8bit || kind == OptimizerKind::lion;
  if (pages && !run.optimizer.paged && !run.parallel.offload_optimizer) {
    out.push_back({"paged optimizer states in CUDA unified memory (--paged-optimizer)", kPaged,
                   [](RunSpec& r) {
                     r.optimizer.paged = true;  // bitsandbytes' 32-bit optimizers: fp32 states
                     if (r.optimizer.kind != OptimizerKind::adam8bit)
                       r.precision.state = Dtype::fp32;
                   }});
  }
  if (run.optimizer.impl != OptimizerImpl::fused) {
    out.push_back({"a fused optimizer step, no step temporaries (--fused-optimizer)", kImpl,
                   [](RunSpec& r) { r.optimizer.impl = OptimizerImpl::fused; }});
  }
}

// More ranks sharding the model states: ZeRO stages over the ranks there are, and ZeRO-3
// (FSDP) over more GPUs.
void parallel_moves(const RunSpec& run, std::vector<Move>& out) {
  const std::uint64_t dp = run.parallel.data_parallel;
  if (dp > 1) {
    for (unsigned stage = run.parallel.zero_stage + 1; stage <= 3; ++stage) {
      out.push_back({fmt::format("ZeRO stage {} over the {} data-parallel ranks (--zero {})", stage,
                                 dp, stage),
                     kParallel, [stage](RunSpec& r) { r.parallel.zero_stage = stage; }});
    }
  }
  for (std::uint64_t n : {dp * 2, dp * 4, dp * 8}) {
    if (n < 2 || n > 1024) continue;
    out.push_back({fmt::format("{} GPUs with ZeRO-3 / FSDP full sharding (--dp {} --zero 3)", n, n),
                   kParallel,
                   [n](RunSpec& r) {
                     r.parallel.data_parallel = n;
                     r.parallel.zero_stage = 3;
                   },
                   true});
  }
  if (!run.parallel.offload_optimizer && run.precision.master && !run.optimizer.paged) {
    out.push_back({"master weights and optimizer states in host memory (--offload optimizer)",
                   kOffload, [](RunSpec& r) { r.parallel.offload_optimizer = true; }});
  }
}

void training_moves(const RunSpec& run, const Gpu* gpu, std::vector<Move>& out) {
  const bool has_batch = run.training.micro_batch > 0 && run.training.seq_len > 0;
  if (!has_batch) return;
  if (run.training.recompute != Recompute::full) {
    out.push_back({"full activation recompute (--recompute full)", kRecompute,
                   [](RunSpec& r) { r.training.recompute = Recompute::full; }});
  }
  if (run.training.attention != Attention::flash && (!gpu || gpu_support(*gpu).flash_attention)) {
    out.push_back({"flash attention (--attention flash)", kAttention,
                   [](RunSpec& r) { r.training.attention = Attention::flash; }});
  } else if (run.training.attention == Attention::eager) {
    out.push_back({"PyTorch's memory-efficient attention (--attention sdpa)", kAttention,
                   [](RunSpec& r) { r.training.attention = Attention::sdpa; }});
  }
  if (run.training.micro_batch > 1) {
    const std::uint64_t b = run.training.micro_batch / 2, a = run.training.grad_accum * 2;
    out.push_back(
        {fmt::format("half the micro-batch, twice the accumulation (--batch {} --grad-accum {})", b,
                     a),
         kBatch, [b, a](RunSpec& r) {
           r.training.micro_batch = b;
           r.training.grad_accum = a;
         }});
  }
}

bool has_adapters(const Inventory& inventory) {
  return std::any_of(inventory.groups.begin(), inventory.groups.end(),
                     [](const TensorGroup& g) { return g.role == Role::adapter; });
}

bool has_nf4(const Inventory& inventory) {
  return std::any_of(inventory.groups.begin(), inventory.groups.end(),
                     [](const TensorGroup& g) { return g.storage == Dtype::nf4; });
}

void adapter_moves(const RunSpec& run, std::vector<Move>& out) {
  if (!run.model.arch) return;
  const Inventory& inv = run.model.inventory;
  if (has_adapters(inv) && !has_nf4(inv)) {  // LoRA already: its base in 4 bits is QLoRA
    out.push_back({"QLoRA: the frozen base in nf4 under the same adapters (--qlora --double-quant)",
                   kAdapters, [](RunSpec& r) { quantize_frozen_base(r.model, true); }});
    return;
  }
  if (trainable_count(inv) != parameter_count(inv)) return;
  for (bool q : {false, true}) {
    out.push_back({q ? "QLoRA: nf4 base, rank-16 adapters (--lora-rank 16 --lora-targets "
                       "all-linear --qlora --double-quant)"
                     : "LoRA: frozen base, rank-16 adapters (--lora-rank 16 --lora-targets "
                       "all-linear)",
                   kAdapters, [q](RunSpec& r) {
                     apply_lora(r.model, LoraSpec{16, {"all-linear"}, q, q});
                   }});
  }
}

// The memory a changed run needs, or nothing when this model cannot take the change (LoRA
// without an architecture).
std::optional<std::uint64_t> try_need(const RunSpec& r, NeedCache& need) {
  try {
    return need(r);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Each set of changes from different groups, single changes first, then pairs, then triples.
template <typename Visit>
void each_change_set(const std::vector<Move>& moves, Visit&& visit) {
  const std::size_t m = moves.size();
  const auto distinct = [&](std::initializer_list<std::size_t> set) {
    for (std::size_t a : set) {
      for (std::size_t b : set) {
        if (a < b && moves[a].group == moves[b].group) return false;
      }
    }
    return true;
  };
  for (std::size_t i = 0; i < m; ++i) visit({i});
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = i + 1; j < m; ++j) {
      if (distinct({i, j})) visit({i, j});
    }
  }
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = i + 1; j < m; ++j) {
      for (std::size_t k = j + 1; k < m; ++k) {
        if (distinct({i, j, k})) visit({i, j, k});
      }
    }
  }
}

// What fits first; of those, what keeps to the GPUs given first, then the fewest changes; then
// by need, smallest first.
bool ranks_before(const Remedy& a, const Remedy& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits && a.more_gpus != b.more_gpus) return !a.more_gpus;
  if (a.fits && a.changes != b.changes) return a.changes < b.changes;
  return a.need < b.need;
}

}  // namespace

std::vector<Remedy> remedies(const RunSpec& run, const Budget& budget) {
  const std::vector<Move> forced = runnable_moves(run, budget);
  RunSpec base = run;  // what runs on this GPU at all
  for (const Move& f : forced) f.apply(base);
  const Gpu* gpu = budget_gpu(budget);
  std::vector<Move> moves;
  precision_moves(base, gpu, moves);
  parallel_moves(base, moves);
  training_moves(base, gpu, moves);
  adapter_moves(base, moves);
  NeedCache need;
  const std::uint64_t before = need(run);
  std::vector<Remedy> out;
  std::vector<std::vector<std::size_t>> fitting;  // the change sets that fit, to keep them minimal
  each_change_set(moves, [&](const std::vector<std::size_t>& set) {
    for (const auto& f : fitting) {  // a set with a fitting subset adds nothing
      if (std::includes(set.begin(), set.end(), f.begin(), f.end())) return;
    }
    RunSpec r = base;
    std::vector<std::string> names;
    names.reserve(forced.size() + set.size());
    bool more_gpus = false;
    for (const Move& f : forced) names.push_back(f.change);
    for (std::size_t i : set) {
      moves[i].apply(r);
      names.push_back(moves[i].change);
      more_gpus = more_gpus || moves[i].more_gpus;
    }
    const auto n = try_need(r, need);
    if (!n || *n >= before || !unsupported_features(r, budget).empty()) return;
    const bool fits = *n <= budget.usable();
    if (set.size() > 1 && !fits) return;  // combinations are shown only when they fit
    if (fits) fitting.push_back(set);
    out.push_back({fmt::format("{}", fmt::join(names, " + ")), std::move(r), *n, fits,
                   set.size() + forced.size(), more_gpus});
  });
  std::stable_sort(out.begin(), out.end(), ranks_before);
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
  rows.reserve(static_cast<std::size_t>(sweep_size(grid)));
  sweep(run, grid, budget, [&](const SweepRow& row) { rows.push_back(row); });
  return rows;
}

void check_sweep(const RunSpec& run, const SweepGrid& grid) {
  sweep_size(grid);
  if (!run.parallel.splits_model()) return;
  RunSpec point = run;
  for (const std::uint64_t s : grid.seq_lens) {
    if (s == 0 || s == run.training.seq_len) continue;
    point.training.seq_len = s;
    check_layout(point);
  }
}

void sweep(const RunSpec& run, const SweepGrid& grid, const std::optional<Budget>& budget,
           const std::function<void(const SweepRow&)>& emit) {
  check_sweep(run, grid);
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
  NeedCache split;
  RunSpec point = run;
  for (const auto& p : policies) {
    point.precision = p;
    point.optimizer = spec_of(optimizers.front());
    point.training.micro_batch = batches.front() ? batches.front() : 1;
    point.training.seq_len = seqs.front() ? seqs.front() : 1;
    const auto in = activation_inputs(point, Notes::skipped);
    std::optional<PeakPlan> base;  // a split run has a plan per stage, in `split`
    if (in && !point.parallel.splits_model()) base.emplace(point, *in);
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
            need = split(point);
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
