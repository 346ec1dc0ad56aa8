#pragma once

#include <memest/activation.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace memest {

struct RunSpec;

/// What is live at a moment, in the categories of the reference measurements
/// (tests/data/truth/SOURCES.md): the parts sum to the moment's bytes.
enum class Part {
  params,
  master_params,
  optimizer_state,
  grads,
  master_grads,
  grad_accum,
  activations,
  param_casts,
  inputs,
  buffers,
  other
};
inline constexpr std::size_t kPartCount = 11;
/// JSON spelling of a part: "params", "optimizer_state", ...
std::string_view part_name(Part part);
/// For people: "master params", "temporaries and other", ...
std::string_view part_label(Part part);

/// One moment of the step walk (docs/activation-derivation.md §4): live device bytes.
struct Moment {
  std::string_view name;   ///< "forward_end", "backward_start", "backward_mlp_last_layer", ...
  std::string_view phase;  ///< forward, backward, grad_copy, optimizer, master_copy, zero_grad
  std::uint64_t bytes = 0;
  std::array<std::uint64_t, kPartCount> parts{};  ///< composition, sums to `bytes`
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
  /// The first step: optimizer states appear lazily in its optimizer phase, and no gradients
  /// are kept from an earlier step.
  std::uint64_t first_step_bytes = 0;
  std::string_view first_step_phase;
  std::string_view first_step_moment;
  /// --allocator cuda: each block rounded to 512 B, and the segments the caching allocator
  /// reserves for the blocks live at the peak (modelled, not measured).
  std::optional<std::uint64_t> allocated_bytes;
  std::optional<std::uint64_t> reserved_bytes;
  std::uint64_t context_reserve = 0;  ///< --context-reserve, a stated constant
  /// Autocast weight copies kept for backward (saved by the matmuls; with full recompute only
  /// the lm_head's): part of `working_copies`, not of the activations.
  std::uint64_t saved_weight_copies = 0;
  /// What a device must hold: the reserved bytes (allocator cuda) or the peak, plus the
  /// context reserve.
  std::uint64_t needed = 0;

  const Moment& peak_moment() const { return moments[winner]; }
};

/// The CPU RNG state torch.utils.checkpoint keeps per checkpointed layer (bytes).
inline constexpr std::uint64_t kRngStateBytes = 5056;
/// The record_function handle torch.optim allocates in step() and zero_grad() (CPU, bytes).
inline constexpr std::uint64_t kRecordFunctionBytes = 292;

/// Walks the step and returns its peak; `act` must be activation_bytes(in). Pure and string
/// free, so searches can call it millions of times; `first_step` false skips the first-step
/// walk (first_step_* then repeat the steady state), which `needed` does not depend on.
Peak peak_of(const RunSpec& run, const ActivationInputs& in, const ActivationBytes& act,
             bool first_step = true);

/// The CUDA caching allocator's block size for a request: at least 512 B, rounded up to a
/// multiple of 512 B (PyTorch c10/cuda/CUDACachingAllocator.cpp, round_size).
std::uint64_t cuda_block_size(std::uint64_t bytes);

/// The peak of one run at many micro-batch and sequence sizes: what depends on the model, the
/// precision and the optimizer is computed once, so searches and sweeps pay only for the
/// activations and the walk. needed(b, s) equals peak_of(...).needed for that run at b and s.
class PeakPlan {
 public:
  /// `in` from activation_inputs(run); its micro-batch and sequence are replaced by needed().
  PeakPlan(const RunSpec& run, const ActivationInputs& in);
  ~PeakPlan();
  PeakPlan(PeakPlan&&) noexcept;
  PeakPlan& operator=(PeakPlan&&) noexcept;

  /// What a device must hold (Peak::needed) at this micro-batch and sequence length. Not
  /// thread-safe: one plan per thread.
  std::uint64_t needed(std::uint64_t micro_batch, std::uint64_t seq_len) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace memest
