#pragma once

#include <memest/shape.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace memest {

/// What a live tensor is, in the categories of the reference measurements
/// (tests/data/truth/SOURCES.md).
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
/// For people, in the table's words: "parameters", "master weights", "temporaries and other"...
std::string_view part_label(Part part);

/// How every output names and colours one kind of memory: a part of the step, a row of the
/// estimate (Category::key), or both (src/step/memory_kinds.cpp holds the one table).
struct MemoryKind {
  std::string_view part;      ///< the Part's JSON name; empty for a row that is no part
  std::string_view category;  ///< the Category's key; empty for a part that is no row
  std::string_view label;     ///< for people: the words of the table's rows
  std::uint32_t colour;       ///< 0xRRGGBB, the same in the bar, the pictures and the web page
};
/// Every kind: the parts in Part's order, then the rows that are no part, then the allocator's
/// rounding and context.
std::span<const MemoryKind> memory_kinds();
const MemoryKind& part_kind(Part part);
/// The row `key`'s kind (Category::key); an unknown key gets the allocator's neutral colour.
const MemoryKind& category_kind(std::string_view key);
/// What the device needs beyond the live tensors (the caching allocator's rounding, the context).
const MemoryKind& allocator_slack_kind();

/// Where a tensor sits in the step: what the walker selects it by.
enum class Scope : std::uint8_t {
  layer,       ///< saved by every layer (attention, norms, masks)
  dense_mlp,   ///< saved by a dense MLP layer
  moe_mlp,     ///< saved by an MoE layer
  checkpoint,  ///< full recompute: the layer input, kept once per layer
  core,        ///< selective recompute: the attention core, recomputed in backward, not stored
  shared,      ///< saved once for all layers (rotary tables, masks)
  embed,       ///< saved by the embedding
  head,        ///< saved by the head and the loss
  state,       ///< model and optimizer state (parameters, gradients, states, weight copies)
  transient    ///< alive inside one op or between two (logits, gradients in flight, scratch)
};

inline constexpr std::size_t kScopeCount = 10;

/// JSON spelling of a scope: "layer", "dense_mlp", "shared", ...
std::string_view scope_name(Scope scope);

/// What a saved tensor of a layer is, so the walker can tell which backward op releases it.
enum class Slot : std::uint8_t {
  none,
  norm1,     ///< the first norm's saved tensors
  norm2,     ///< the second norm's (released with the MLP's backward)
  q_in,      ///< the attention input (norm output or its autocast casts)
  mlp_in,    ///< the MLP input
  q,         ///< q as the attention kernel or matmul reads it
  k,         ///< k
  v,         ///< v
  lse,       ///< SDPA/flash log-sum-exp and RNG seeds
  scale,     ///< the score scale or divisor
  sm,        ///< the softmax output
  pc,        ///< the probabilities in the compute dtype (attn@V operand)
  dmask,     ///< the attention dropout mask
  dropped,   ///< the attention dropout output (attn@V operand)
  o_in,      ///< the o_proj input
  rmask,     ///< the residual dropout mask after attention
  mmask,     ///< the residual dropout mask after the MLP
  mlp,       ///< the MLP's saved tensors
  extra,     ///< extra norms and q/k norms
  target,    ///< the loss target and total_weight: released by the loss's backward
  log_probs  ///< the loss's log-probabilities (or softmax) over the vocabulary
};

/// The micro-batches a tensor exists for: some kernels differ at batch 1 (a stride-0 view
/// instead of a copy, the padded labels as the saved target).
enum class Batch : std::uint8_t { any, one, many };

/// The CUDA stream a tensor is allocated on. The caching allocator keeps each stream's cached
/// blocks apart: a block freed on one stream serves only requests on that stream.
enum class Stream : std::uint8_t {
  compute,          ///< the default stream
  fsdp_all_gather,  ///< FSDP1's unshard stream, FSDP2's all-gather copy-in stream
  /// FSDP1's post-backward stream, FSDP2's reduce-scatter stream: the cast to reduce_dtype
  /// (FSDP1) and the reduce-scatter's output, which the sharded gradients are.
  fsdp_reduce,
};

/// One tensor PyTorch allocates in a training step: its name, size as a shape of symbols, the
/// bytes per element, the part of memory it belongs to.
struct Tensor {
  std::string_view name;
  Part part = Part::other;
  Scope scope = Scope::transient;
  Slot slot = Slot::none;
  std::uint64_t width = 1;  ///< bytes per element; a scalar's whole size when the shape is empty
  Poly bytes;               ///< width x elements, from `shape`
  Batch batch = Batch::any;
  /// A layer's tensor the first layer does not save: its input does not require grad (frozen
  /// embeddings) and the tensor is kept only for that input's gradient.
  bool skips_first = false;
  Stream stream = Stream::compute;

  /// The monomial of a size that has one, else -1 (the plan's fast path).
  int mono = -1;
  /// Last: what the walk and the sums read of every tensor is in the record's first 104 bytes.
  Shape shape;

  bool empty() const {
    if (mono >= 0) return false;
    std::uint64_t any = 0;  // an OR per coefficient: no comparison with a zero Poly
    for (const std::uint64_t c : bytes.c) any |= c;
    return any == 0;
  }
  /// Whether the tensor exists at the point `x` (batch 1 or more).
  bool exists_at(const Basis& x) const { return exists(x[kMonoB] == 1); }
  /// Whether the tensor exists at this micro-batch (batch 1 or more).
  bool exists(bool batch_one) const {
    return batch == Batch::any || (batch == Batch::one) == batch_one;
  }
};

/// `count` copies of tensor `tensor` (one per layer, or the layers below the current one).
/// With `ranks` > 1 the entry is one rank's share: ceil(count x bytes / ranks) (ZeRO).
struct Entry {
  std::uint32_t tensor = 0;
  std::uint32_t ranks = 1;
  std::uint64_t count = 1;
};

/// The phases of a training step, in the order they run.
enum class Phase : std::uint8_t { forward, backward, grad_copy, optimizer, master_copy, zero_grad };
inline constexpr std::size_t kPhaseCount = 6;
/// The report's spelling of a phase: "forward", "grad_copy", ...
std::string_view phase_name(Phase phase);

/// The moments of a training step, in the order they happen: this order is the step's time
/// order, stated once (the allocator's replay and the timeline follow it). Four happen inside
/// every layer's backward (backward_mlp to post_backward, in this order at one layer), from the
/// last layer down; forward_attention happens inside every layer's forward, from the first up.
/// The *_step_in_backward moments exist with the optimizer in backward, post_backward with FSDP.
enum class MomentKind : std::uint8_t {
  forward_attention,           ///< a layer's attention in forward, at its scores
  forward_end,                 ///< at the loss: everything saved, the logits
  backward_start,              ///< the loss's backward
  head_step_in_backward,       ///< the lm_head's optimizer step (optimizer in backward)
  backward_mlp,                ///< inside a layer's MLP backward
  layer_step_in_backward,      ///< a layer's tensor stepped (optimizer in backward)
  backward_attention,          ///< inside a layer's attention backward
  post_backward,               ///< FSDP's post-backward of a layer unit: its gradient reduced
  backward_end,                ///< the embedding's backward: every gradient exists
  embedding_step_in_backward,  ///< the embedding's optimizer step (optimizer in backward)
  grad_copy,                   ///< master gradients made from the half-precision ones
  optimizer,                   ///< the optimizer step
  master_copy,                 ///< master weights copied back into the model
  zero_grad                    ///< gradients zeroed or released
};
inline constexpr std::size_t kMomentKindCount = 14;
/// The phase a moment belongs to.
constexpr Phase phase_of(MomentKind kind) {
  switch (kind) {
    case MomentKind::forward_attention:
    case MomentKind::forward_end:
      return Phase::forward;
    case MomentKind::grad_copy:
      return Phase::grad_copy;
    case MomentKind::optimizer:
      return Phase::optimizer;
    case MomentKind::master_copy:
      return Phase::master_copy;
    case MomentKind::zero_grad:
      return Phase::zero_grad;
    default:
      return Phase::backward;
  }
}

/// Which layer an in-layer moment is at: the walk visits the last and the first layer (the
/// largest of a moment linear in the layer index is at an end), the timeline every layer.
enum class LayerAt : std::uint8_t { none, last, first, each };

/// A moment of the walk: what happens and at which layer.
struct MomentId {
  MomentKind kind = MomentKind::forward_end;
  LayerAt at = LayerAt::none;
  bool operator==(const MomentId&) const = default;
};
/// The report's spelling of a moment: "forward_end", "backward_mlp_last_layer", and in the
/// timeline (LayerAt::each) "backward_mlp".
std::string_view moment_name(MomentId id);
/// A moment's place in one step's time order: smaller happens earlier. The in-layer moments
/// at the last layer come before those at the first.
std::uint32_t time_rank(MomentId id);
/// Whether a moment is its whole phase (grad_copy, optimizer, master_copy, zero_grad).
bool is_whole_phase(MomentKind kind);

/// One moment of the walk: the tensors live at it, entries [begin, end) of Step::entries.
/// Consecutive moments with one id are alternatives inside one op; the largest is that moment.
struct MomentSpec {
  MomentId id;
  std::uint32_t begin = 0, end = 0;
  std::int32_t layer = -1;  ///< the layer of an in-layer moment of Step::timeline, else -1
};

/// A training step as data: every tensor and every moment of the walk, for one run. Sizes are
/// polynomials in b and s, and tensors that differ at batch 1 are rows of their own, so one
/// Step serves every micro-batch and sequence length.
struct Step {
  std::vector<Tensor> tensors;
  std::vector<Entry> entries;
  std::vector<MomentSpec> steady;  ///< the steady-state walk
  /// The first step, when it differs from the steady state by more than the optimizer states
  /// before the optimizer phase (gradients kept between steps); else empty.
  std::vector<MomentSpec> first;
  /// The steady walk in step order with every layer's moments (forward at each layer, the loss,
  /// backward at each layer, the optimizer): the picture of --plot. Empty unless asked for.
  std::vector<MomentSpec> timeline;
  /// The saved tensors of the forward pass: each layer tensor counts once per layer.
  std::vector<Entry> saved;
  /// The MLP the walk gives every layer: dense, MoE, or the larger of the two for models that
  /// mix them (an upper bound for the dense layers).
  Scope walk_mlp = Scope::dense_mlp;
  std::uint32_t states_tensor = 0;              ///< the optimizer states' tensor
  std::vector<std::uint32_t> step_temporaries;  ///< the optimizer step's temporaries
  std::uint64_t state_bytes = 0;                ///< optimizer states, without the step counters
  std::uint64_t step_counter_bytes = 0;         ///< `step` tensors held in device memory
};

}  // namespace memest
