#pragma once

#include <memest/estimate.hpp>
#include <memest/hardware.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memest {

/// The sequence length `fit` assumes when searching the micro-batch and none is given.
inline constexpr std::uint64_t kFitDefaultSeq = 2048;

/// What `fit` makes as large as the budget allows.
enum class FitTarget { micro_batch, seq_len };

/// The largest value of the target that fits, and the need on either side of the boundary, so a
/// caller can see the answer is tight: need_at_best <= usable < need_past_best.
/// A size below the answer that does not fit (--allocator cuda: the caching allocator's
/// reserved bytes are not monotone in the size).
struct SmallerOver {
  std::uint64_t value = 0;
  std::uint64_t need = 0;  ///< 0 when past 2^64 bytes
};

struct FitResult {
  std::optional<std::uint64_t> best;  ///< absent when even 1 does not fit
  std::uint64_t need_at_best = 0;
  std::uint64_t need_past_best = 0;  ///< need at best + 1 (0 when best is the limit)
  /// The need at best + 1 (or at 1 when nothing fits) is past 2^64 bytes, the largest size the
  /// estimator counts: need_past_best is then 0, not a number of bytes.
  bool past_best_beyond_limit = false;
  bool limit_is_model = false;  ///< the limit is the model's positions (fit --for seq)
  std::uint64_t usable = 0;
  std::uint64_t limit = 0;        ///< the largest value tried
  std::uint64_t evaluations = 0;  ///< estimates computed
  /// The value of the target the user gave (--batch for the micro-batch), which fit answers
  /// beside the largest: where it was given and what it needs. Set by the caller.
  std::optional<std::uint64_t> given;
  std::string given_where;
  std::uint64_t need_at_given = 0;
  /// What the run asks of the budget's GPU that it lacks (unsupported_features,
  /// include/memest/gpu_support.hpp), one sentence each. Set by the caller.
  std::vector<std::string> warnings;
  /// Set when a smaller size than `best` needs more than the budget (asked at size 1).
  std::optional<SmallerOver> smaller_over;
};

/// Searches the largest micro-batch (or sequence length) in [1, limit] that fits `budget`, by
/// doubling then bisection over bytes_needed(), which grows with both. The other training
/// values are taken from `run`; the sequence defaults to kFitDefaultSeq and the batch to 1 when
/// unset.
FitResult fit_largest(RunSpec run, const Budget& budget, FitTarget target,
                      std::uint64_t limit = 1 << 20);

class NeedCache;

/// fit_largest asking the caller's `need` about a split run (one plan per pipeline stage), so a
/// caller that asked about the same run first (fit_layouts, at the layout's micro-batch) does
/// not compile its step again.
FitResult fit_largest(RunSpec run, const Budget& budget, FitTarget target, std::uint64_t limit,
                      NeedCache& need);

/// One change that lowers the memory a run needs, with its result.
struct Remedy {
  std::string change;  ///< for people: "pure bf16 (--precision bf16)"
  RunSpec run;         ///< the run with the change applied
  std::uint64_t need = 0;
  bool fits = false;
  std::size_t changes = 1;  ///< how many changes `change` combines
  bool more_gpus = false;   ///< it spreads the run over more GPUs than given
};

/// How many remedies the table shows; JSON lists them all.
inline constexpr std::size_t kRemediesShown = 10;

/// Changes that save memory (precision, 8-bit or fused optimizer, ZeRO/FSDP over more GPUs,
/// offload, recompute, flash attention, smaller micro-batch with more accumulation,
/// LoRA/QLoRA), each estimated: every single change that saves something, and the
/// combinations of two or three that fit while no part of them does. Those that fit come
/// first, fewest changes first; then by need, smallest first.
std::vector<Remedy> remedies(const RunSpec& run, const Budget& budget);

/// One way to spread a run over a number of GPUs that fits the budget.
struct LayoutFit {
  ParallelSpec parallel;
  Recompute recompute = Recompute::none;
  std::uint64_t need = 0;      ///< per device, at the run's micro-batch and sequence
  std::uint64_t headroom = 0;  ///< usable - need
  std::uint64_t largest = 0;   ///< the largest micro-batch (or sequence) that fits this layout
};

/// What the user fixed of a layout (--tp, --pp, --cp, --dp, --zero, --recompute): `fit --gpus`
/// searches only the layouts that keep it.
struct LayoutConstraints {
  std::optional<std::uint64_t> tensor, pipeline, context, data_parallel;
  std::optional<unsigned> zero_stage;
  std::optional<Recompute> recompute;
};

/// The layouts `fit --gpus` tried and those that fit.
struct LayoutSearch {
  std::uint64_t gpus = 0;
  FitTarget target = FitTarget::micro_batch;
  std::uint64_t limit = 0;      ///< the largest value of the target tried
  LayoutConstraints fixed;      ///< what the user fixed, kept by every layout
  std::uint64_t tried = 0;      ///< valid layouts estimated
  std::vector<LayoutFit> fits;  ///< most headroom first (for a sequence: the longest first)
};

/// Told how far a layout search has come: the candidate layouts looked at and all of them
/// (`memest fit --gpus` prints it at a terminal).
using LayoutProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// Every layout of `gpus` devices: tensor parallelism within a node of 8 (1, 2, 4, 8), pipeline
/// stages dividing the layers (m = max(grad_accum, p) micro-batches, 1F1B), context parallelism
/// (1, 2, 4, 8; not with eager attention), data parallelism over the rest with ZeRO 0-3, and
/// recompute none, selective or full. Those that fit at the run's micro-batch, with the largest
/// micro-batch each allows (at most `max_batch`), most headroom first. Memory only: speed is not
/// modelled. With FitTarget::seq_len the largest sequence of each layout is searched instead
/// (at most `max`), at the run's micro-batch, and those that fit at sequence 1 (or the run's)
/// are listed longest first. `fixed` keeps what the user gave; throws Error naming the flag when
/// it cannot make `gpus` devices. `progress`, when given, is told after each candidate layout
/// (with each recompute choice), ending at (total, total).
LayoutSearch fit_layouts(const RunSpec& run, const Budget& budget, std::uint64_t gpus,
                         std::uint64_t max, FitTarget target = FitTarget::micro_batch,
                         const LayoutConstraints& fixed = {}, const LayoutProgress& progress = {});

/// A grid of runs: every combination of the listed values (an empty list keeps the run's own).
struct SweepGrid {
  std::vector<std::uint64_t> micro_batches;
  std::vector<std::uint64_t> seq_lens;
  std::vector<PrecisionPolicy> policies;
  std::vector<OptimizerKind> optimizers;
};

/// One point of a sweep.
struct SweepRow {
  std::uint64_t micro_batch = 0, seq_len = 0;
  std::string precision;
  OptimizerKind optimizer = OptimizerKind::adamw;
  std::uint64_t need = 0;
  std::optional<bool> fits;  ///< when a budget is given
};

/// The most rows one sweep computes: a million rows of CSV are about 50 MB, and a longer grid
/// is more likely a typo (a list pasted twice) than a question.
inline constexpr std::uint64_t kMaxSweepRows = 1'000'000;

/// The rows of the grid around `run` (each empty list counts one); throws Error naming the list
/// sizes when there are more than kMaxSweepRows.
std::uint64_t sweep_size(const SweepGrid& grid);

/// Throws Error for a grid sweep() refuses: more rows than kMaxSweepRows (sweep_size), or a
/// sequence length that does not split as the run's layout needs (context and sequence
/// parallelism: check_layout's one-line error for that point). sweep() checks it; the command
/// line checks it before printing anything.
void check_sweep(const RunSpec& run, const SweepGrid& grid);

/// Evaluates every point of the grid around `run`, in row-major order (batch, seq, policy,
/// optimizer), handing each row to `emit` as it is computed (nothing is kept). Throws Error
/// before any row when the grid is past kMaxSweepRows.
void sweep(const RunSpec& run, const SweepGrid& grid, const std::optional<Budget>& budget,
           const std::function<void(const SweepRow&)>& emit);

/// The rows of sweep(), collected.
std::vector<SweepRow> sweep(const RunSpec& run, const SweepGrid& grid,
                            const std::optional<Budget>& budget);

}  // namespace memest
