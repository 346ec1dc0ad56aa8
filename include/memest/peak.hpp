#pragma once

#include <memest/activation.hpp>
#include <memest/allocator_replay.hpp>
#include <memest/run_spec.hpp>
#include <memest/step.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace memest {

/// One moment of the step walk (docs/activation-derivation.md §4): live device bytes.
struct Moment {
  std::string_view name;   ///< moment_name(id): "forward_end", "backward_mlp_last_layer", ...
  std::string_view phase;  ///< phase_name(phase_of(id.kind)): "forward", "backward", ...
  std::uint64_t bytes = 0;
  std::array<std::uint64_t, kPartCount> parts{};  ///< composition: the live tensors by part
  std::int32_t layer = -1;  ///< the layer of an in-layer moment of Peak::timeline, else -1
  MomentId id;              ///< what the moment is, for code; `name` and `phase` are for people
};

/// One named tensor live at the peak: `count` copies of `bytes_each`, `bytes` in all (one
/// rank's share when sharded).
struct LiveTensor {
  std::string_view name;
  Part part = Part::other;
  std::uint64_t count = 1;
  std::uint64_t bytes_each = 0;
  std::uint64_t bytes = 0;
  std::uint64_t width = 0;
  Shape shape;
  std::uint32_t ranks = 1;
};

/// The largest moment of one phase.
struct PhasePeak {
  std::string_view phase;
  std::uint64_t bytes = 0;
  std::string_view moment;
};

/// The peak of live bytes over a training step, per device.
struct Peak {
  std::vector<Moment> moments;  ///< the steady-state walk, in step order
  std::size_t winner = 0;       ///< index of the largest moment
  std::uint64_t bytes = 0;      ///< steady-state peak (requested bytes, max_memory_allocated)
  std::string_view phase;
  std::vector<PhasePeak> by_phase;
  /// Every tensor live at the peak: the composition is their sum by part.
  std::vector<LiveTensor> live;
  /// The first step: optimizer states appear lazily in its optimizer phase, and no gradients
  /// are kept from an earlier step.
  std::uint64_t first_step_bytes = 0;
  std::string_view first_step_phase;
  std::string_view first_step_moment;
  MomentId first_step_id;  ///< the moment first_step_moment names
  /// --allocator cuda: each block rounded to 512 B, and the segments the caching allocator
  /// reserves for the blocks live at the peak (modelled, not measured).
  std::optional<std::uint64_t> allocated_bytes;
  std::optional<std::uint64_t> reserved_bytes;
  /// The replay that gave allocated_bytes and reserved_bytes: where each peaks.
  std::optional<AllocatorReplay> allocator;
  std::uint64_t context_reserve = 0;  ///< --context-reserve, a stated constant
  /// What nvidia-smi shows for the process: reserved plus the context, when the allocator is
  /// replayed and a context is stated (--context-reserve).
  std::optional<std::uint64_t> nvidia_smi_bytes;
  /// Autocast weight copies kept for backward (saved by the matmuls; with full recompute only
  /// the lm_head's): part of `working_copies`, not of the activations.
  std::uint64_t saved_weight_copies = 0;
  /// What a device must hold: the reserved bytes (allocator cuda) or the peak, plus the
  /// context reserve.
  std::uint64_t needed = 0;
  /// The steady step in the order it runs, every layer's moments included (forward at each
  /// layer, the loss, backward at each layer, the optimizer), alternatives reduced to their
  /// largest: what --plot draws. Empty unless asked for (StepOptions::timeline).
  std::vector<Moment> timeline;
  std::size_t timeline_peak = 0;  ///< index of the first largest moment of `timeline`

  const Moment& peak_moment() const { return moments[winner]; }
};

/// The CPU RNG state torch.utils.checkpoint keeps per checkpointed layer (bytes).
inline constexpr std::uint64_t kRngStateBytes = 5056;
/// The record_function handle torch.optim allocates in step() and zero_grad() (CPU, bytes).
inline constexpr std::uint64_t kRecordFunctionBytes = 292;

/// The saved activations and the peak of one run, from one walk of its step.
struct StepEstimate {
  ActivationBytes activations;
  Peak peak;
};

/// What estimate_step computes besides the peak of the steady step.
struct StepOptions {
  bool with_terms = false;  ///< list the saved tensors (ActivationBytes::terms, for --explain)
  /// Walk the first step too; without it first_step_* repeat the steady state (`needed` does
  /// not depend on it).
  bool first_step = true;
  bool timeline = false;  ///< fill Peak::timeline (--plot)
};

/// Walks the run's step at its micro-batch and sequence length. Throws Error when a size
/// passes 2^64 bytes.
StepEstimate estimate_step(const RunSpec& run, const ActivationInputs& in,
                           const StepOptions& options = {});

/// A run's step compiled once: each moment's bytes as a polynomial in the micro-batch and the
/// sequence length, so searches and sweeps evaluate a step with a few multiply-adds.
/// needed(b, s) equals estimate_step(...).peak.needed for that run at b and s.
class PeakPlan {
 public:
  /// `in` from activation_inputs(run); its micro-batch and sequence are replaced by needed().
  PeakPlan(const RunSpec& run, const ActivationInputs& in);
  ~PeakPlan();
  PeakPlan(PeakPlan&&) noexcept;
  PeakPlan& operator=(PeakPlan&&) noexcept;

  /// What a device must hold (Peak::needed) at this micro-batch and sequence length. Throws
  /// Error past 2^64 bytes.
  std::uint64_t needed(std::uint64_t micro_batch, std::uint64_t seq_len) const;

  /// The same run with another optimizer: equal to PeakPlan(run with `optimizer`, in), made
  /// without walking the step again.
  PeakPlan with_optimizer(const OptimizerSpec& optimizer) const;

 private:
  PeakPlan();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memest
