#pragma once

#include <memest/activation.hpp>
#include <memest/dtype.hpp>
#include <memest/hardware.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/precision.hpp>
#include <memest/run_spec.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// One category of memory. Keys are stable (JSON): params, working_copies, master_weights,
/// grads, grad_accum, optimizer_states, optimizer_step, activations.
/// `key` and `label` view constants (the words of src/step/memory_kinds.cpp's table, or string
/// literals): they are never owned by the row, so building one allocates nothing for them.
struct Category {
  std::string_view key;
  std::string_view label;              ///< for people: "parameters", "optimizer states"
  std::optional<Dtype> dtype;          ///< absent when mixed (optimizer states) or unused
  std::uint64_t elements = 0;          ///< elements the bytes are spread over
  std::optional<std::uint64_t> bytes;  ///< absent when not estimated (see `basis`)
  std::string basis;                   ///< how the bytes follow, or why they are not estimated
  bool on_device = true;               ///< false for host memory (PyTorch's step counters)
  /// In CUDA unified memory (a paged optimizer's states): neither a device row, whose sum the
  /// allocator's statistics compare with, nor host memory.
  bool unified = false;
  bool per_param = true;  ///< elements are parameters (false: the step counters' tensors)

  /// bytes / elements, 0 when unused or not estimated.
  double bytes_per_element() const;
};

/// One pipeline stage of a split run, as its device sees it.
struct StageSummary {
  std::uint64_t stage = 0;
  std::uint64_t first_layer = 0, layers = 0;  ///< the layers the stage holds
  std::vector<LayerRange> chunks;             ///< its model chunks' layers, in its chunk order
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  std::uint64_t in_flight = 1;              ///< micro-batches whose activations it keeps
  bool embedding = false, head = false;     ///< whether it holds the embeddings / the head
  std::uint64_t params = 0;                 ///< parameters on one device of the stage
  std::uint64_t total_bytes = 0;            ///< sum of its device categories
  std::optional<std::uint64_t> peak_bytes;  ///< its peak, when activations are estimated
  /// max_memory_allocated of the caching allocator's replay (--allocator cuda): rounded blocks
  /// and the workspaces beside the live peak.
  std::optional<std::uint64_t> allocated_bytes;
  std::uint64_t needed = 0;  ///< what its device must hold
  /// With EstimateOptions::timeline on a pipeline: its live bytes at each step of its schedule,
  /// the largest forward or backward moment of its walk with the (micro-batch, chunk) pairs held
  /// at that step in place of those held at its peak step (--plot draws them).
  std::vector<std::uint64_t> schedule_bytes;
};

/// The result: bytes per category for one device. A run split over devices (tensor, pipeline,
/// context, expert parallelism) gives the device of its worst stage, and lists every stage.
struct Estimate {
  std::uint64_t params = 0;              ///< all parameters
  std::uint64_t trainable = 0;           ///< parameters that get gradients and optimizer states
  std::uint64_t active = 0;              ///< parameters used per token (MoE)
  std::optional<std::uint64_t> tensors;  ///< parameter tensors, when the inventory knows them
  std::vector<Category> categories;
  /// Sum of the estimated device categories (a sum, not the peak: see `peak`);
  /// `total_complete` is false when a category (activations) is not estimated.
  std::uint64_t total_bytes = 0;
  bool total_complete = false;
  std::uint64_t host_bytes = 0;  ///< sum of the estimated host categories (offload, step counters)
  /// Sum of the categories in CUDA unified memory (paged optimizer states): outside the device
  /// total and the peak, and outside torch.cuda's allocated/reserved statistics.
  std::uint64_t unified_bytes = 0;
  std::vector<std::string> assumptions;  ///< what was assumed for lack of information
  /// Saved activations of one micro-batch, when --batch and --seq are given.
  std::optional<ActivationBytes> activations;
  bool activations_approximate = false;  ///< shape or family not measured (see assumptions)
  /// The peak over a training step (docs/activations.md), when activations are estimated.
  std::optional<Peak> peak;
  /// Every pipeline stage of a split run (one entry per stage); empty when the model is whole
  /// on every device. The categories above are those of stage `worst_stage`.
  std::vector<StageSummary> stages;
  std::uint64_t worst_stage = 0;

  /// What the run asks of the model that it cannot do as given (a sequence past a learned
  /// position table): the estimate is of the shapes alone.
  std::vector<std::string> warnings;
  /// What the estimate leaves out that the run may hold (DDP's gradient buckets).
  std::vector<std::string> notes;
  /// A named tensor live at the peak.
  struct Named {
    std::string_view name;
    std::uint64_t bytes = 0;
  };
  /// The tensors live at the peak that no category row holds (master gradients, the optimizer
  /// step's temporaries, the loss's buffers, input ids), largest first; with the rows' live
  /// bytes they make up the peak.
  std::vector<Named> peak_outside_rows;
  std::uint64_t peak_outside_rows_bytes = 0;  ///< their sum

  /// The run's budget (--gpu or --budget) against what the run needs, when one is given.
  std::optional<BudgetCheck> budget;

  /// What a device must hold: the peak's `needed` when the peak is modelled, else the sum of
  /// the device categories.
  std::uint64_t needed() const { return peak ? peak->needed : total_bytes; }

  /// The category with this key; throws std::out_of_range if there is none.
  const Category& at(std::string_view key) const;
};

/// What estimate() computes beyond the categories and the peak.
struct EstimateOptions {
  bool timeline = false;  ///< Peak::timeline: every moment of the step, every layer (--plot)
};

/// Computes the memory of one training step. Pure: no I/O. Throws Error on overflow.
Estimate estimate(const RunSpec& run, const EstimateOptions& options = {});

}  // namespace memest
