// Private to the core: the walk over a training step (src/step/walk*.cpp). One class builds the
// moments; its concerns are files of their own: walk.cpp the phase skeleton (which moments, in
// which order, and what every moment holds), walk_state.cpp the model-state tensors,
// walk_forward.cpp a layer's attention in forward, walk_backward.cpp a layer's backward,
// walk_fsdp.cpp FSDP, walk_in_backward.cpp the optimizer step in backward; residency.hpp where
// each entry is; rules/ the framework behaviours that add tensors or change their lifetimes.
#pragma once

#include "model/model_state.hpp"
#include "parallel/fsdp.hpp"
#include "step/residency.hpp"
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <memest/run_spec.hpp>
#include <memest/units.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace memest::detail {

/// The model-state tensors every moment starts from (walk_state.cpp).
struct StateTensors {
  std::uint32_t params = 0, master = 0, optimizer_states = 0, grad_accum = 0, input_ids = 0,
                buffers = 0, grads = 0;
  std::uint32_t ddp_buckets = 0;      ///< PyTorch DDP's all-reduce buckets: a second gradient copy
  std::uint32_t optimizer_grads = 0;  ///< what the optimizer steps: the master or the model grads
  std::uint32_t head_grads = 0, layer_grads = 0;  ///< gradients of the head, of one layer
  std::uint32_t gathered_layers = 0;  ///< ZeRO-3: this layer's and the prefetched next's params
};

/// Autocast's copies of one layer's weights, by the backward op that releases them.
struct LayerWeightCopies {
  std::uint32_t down = 0, other_mlp = 0, o_proj = 0, qkv = 0;
};

/// The step's scalars and the tensors every backward moment of a layer holds.
struct StepScalars {
  std::uint32_t loss = 0, backward_seed = 0;
  std::uint32_t rng_states = 0;       ///< torch.utils.checkpoint's CPU RNG states
  std::uint32_t output_gradient = 0;  ///< the gradient of the current layer's output
};

/// What a layer's attention holds in forward besides its saved tensors (walk_forward.cpp).
struct AttentionTemporaries {
  std::uint32_t bias_cache = 0, qkv_copies = 0, norm_fp32 = 0, qkv_fp32 = 0, rotated_q = 0,
                fused_qkv = 0;
};

/// PyTorch FSDP in the walk (walk_fsdp.cpp; docs/parallelism.md, "FSDP"): the units
/// all-gathered at each moment, the reduce-scatter's buffers, no_sync().
class FsdpWalk {
 public:
  FsdpWalk(const RunSpec& run, const Sharding& sharding);
  bool on() const { return on_; }
  /// FSDP's no_sync() over an accumulation: whole gradients, no reduce-scatter.
  bool no_sync() const { return no_sync_; }
  const FsdpShards& shards() const { return shards_; }
  /// The width of a gradient autograd computes: FSDP's param_dtype.
  u64 unsharded_width() const { return unsharded_width_; }
  void create_tensors(Step& step, const Sharding& sharding);
  /// Under no_sync(): a layer's gradients are its unit's whole flat gradient, the head's the
  /// root unit's.
  void unsharded_unit_grads(u64 grad_width, const Sharding& sharding, u64 layers, u64& head,
                            u64& layer) const;
  /// Enters the units gathered at the moment being written.
  void gathered(MomentWriter& writer, u64 layers) const;
  /// The post-backward moments of a layer unit, when its gradient is reduce-scattered: `open`
  /// begins one and enters what the layer's backward holds.
  void post_backward(Step& step, MomentWriter& writer, const std::function<void()>& open) const;

 private:
  const RunSpec& run_;
  bool on_ = false, no_sync_ = false;
  bool reduces_ = false;  // a layer unit's gradient is reduce-scattered after its backward
  FsdpShards shards_;
  u64 unsharded_width_ = 0, reduce_width_ = 0;  // param_dtype, reduce_dtype
  std::uint32_t root_ = 0, unit_ = 0, all_gather_ = 0, reduce_scatter_held_ = 0;
};

/// The optimizer step in backward (walk_in_backward.cpp; torchtune optimizer_in_bwd): each
/// parameter has an optimizer of its own, stepped by a post-accumulate-grad hook, and its
/// gradient is then set to None.
class InBackward {
 public:
  explicit InBackward(const RunSpec& run) : on_(run.training.optimizer_in_backward) {}
  bool on() const { return on_; }
  /// The gradients applied one at a time: the largest tensor of a layer, of the head, of the
  /// embedding, each with its step's temporaries; a tied lm_head's gradient waiting for the
  /// embedding's.
  void create_tensors(Step& step, const RunSpec& run, const ActivationInputs& in,
                      const ParameterSums& sums, const OptimizerSizes& sizes, bool tied_grad);
  enum Stepped : std::uint8_t { kLayer, kHead, kEmbedding };
  /// The gradient being applied and its step's temporaries.
  void step(MomentWriter& writer, Stepped which) const;
  std::uint32_t tied_buffer() const { return tied_buffer_; }
  /// The bytes of a gradient produced inside a layer's backward: none is left when each is
  /// applied and freed as it is accumulated.
  u64 unstepped(u64 bytes) const { return on_ ? 0 : bytes; }

 private:
  bool on_ = false;
  std::array<std::uint32_t, 3> grad_{}, temporaries_{};
  std::uint32_t tied_buffer_ = 0;
};

/// The walker's own lists. Storage only: a walker fills each before it reads it, so the lists
/// of an earlier walk can be handed to the next to keep their allocations (build_step_into).
struct WalkLists {
  /// The saved tensors grouped by scope, then those of a walk layer (Walker::index_saved).
  std::vector<std::uint32_t> by_scope;
  std::vector<Entry> stash;  ///< what the device keeps of offloaded saved tensors in forward
  std::vector<Lived> lived;  ///< the rules' tensors (rules/)
  std::vector<std::uint32_t> lived_ids;  ///< the one tensor of each lived one that lives as one
};

/// Builds the moments of one step as lists of tensors.
class Walker {
 public:
  Walker(Step& step, const RunSpec& run, const ActivationInputs& in, const ParameterSums& sums,
         WalkLists lists = {});
  /// The lists, for the next walker's storage.
  WalkLists release_lists() { return std::move(lists_); }

  /// The tensors every walk shares (walk_state.cpp).
  void create_tensors(const Inventory& inventory);
  /// The steady step, or the first of a run, at the last and the first layer.
  void walk(StepOf which);
  /// The steady step in the order it runs, at every layer (docs/design.md, "The timeline").
  void timeline();

 private:
  // walk.cpp: the skeleton.
  void begin(MomentKind kind, u64 j = 0);
  /// Whether a moment holds every gradient: when they live through the step, at the end of
  /// backward (unless each was stepped in backward), or never (the moment enters the gradients
  /// it holds itself).
  enum class AllGrads : std::uint8_t { when_kept, at_backward_end, no };
  void baseline(AllGrads grads);
  // The rules' tensors live at the moment being written, at `anchor`.
  void enter_lived(Anchor anchor) {
    if (lived_kinds_[static_cast<std::size_t>(anchor)] & bit(writer_.current().kind))
      enter_lived_now(anchor);
  }
  void enter_lived_now(Anchor anchor, bool loss_backward = true);
  void enter_saved();
  void enter_saved_except(Slot slot);
  void stash();
  void layers(u64 first, u64 count);
  template <typename Freed>
  void layers(u64 first, u64 count, Freed&& freed);
  void scoped(Scope s, u64 count = 1);
  void embed_and_shared();
  void layer_copies(u64 count);
  void layer_copies_but_down();
  void forward_end();
  void backward_start();
  u64 saved_casts() const;
  void head_backward();
  void backward_end();
  void after_backward();
  void grad_copy();
  bool tied_grad() const { return in_.tied && sums_.embed_trainable > 0; }
  bool llama() const { return in_.graph == LayerGraph::llama; }
  bool checkpointed_layers() const { return checkpointed(in_.recompute); }
  std::uint32_t temp(std::string_view name, Part part, u64 width, const Shape& sh,
                     Batch batch = Batch::any);
  std::uint32_t constant(std::string_view name, Part part, u64 bytes);
  std::uint32_t in_flight(std::string_view name, Part part, u64 bytes);
  std::uint32_t empty(std::string_view name, Part part, Scope scope);
  std::uint32_t sized_later(std::string_view name, Part part, u64 bytes);

  // walk_state.cpp: the tensors of the model state, created once.
  void index_saved();
  void model_state(const Inventory& inventory);
  void gradients();
  void weight_copies();
  void scalars();
  void attention_temporaries();

  // walk_forward.cpp: a layer's attention in forward.
  void forward_attention(u64 j);
  void forward_layers_below();
  bool before_scores(Slot s) const;
  void attention_prelude(u64 j);
  void checkpointed_prelude();
  struct ScoreAlternative;
  std::vector<ScoreAlternative> llama_scores() const;
  std::vector<ScoreAlternative> gpt2_scores() const;

  // walk_backward.cpp: a layer's backward.
  void backward_layer(u64 j);
  void layer_backward_base(u64 j);
  void backward_mlp(u64 j);
  void llama_mlp_backward(u64 j, std::uint32_t down_grad);
  void allgather_backward(u64 j);
  void torchtitan_combine_backward(u64 j);
  void gpt2_mlp_backward(u64 j, std::uint32_t down_grad);
  void backward_attention(u64 j);
  void attention_backward_base(u64 j, Slot also);
  void llama_softmax_backward(u64 j);
  void gpt2_softmax_backward(u64 j);
  u64 flight_grad_width() const;

  // walk_in_backward.cpp: the optimizer step in backward, as the backward reaches each tensor.
  bool grads_live() const;
  void gradients_of_layers_above(u64 j);
  void head_step_in_backward();
  void layer_step_in_backward(u64 j);
  void embedding_step_in_backward();

  Step& step_;
  const RunSpec& run_;
  const ActivationInputs& in_;
  const ParameterSums& sums_;  // the parameter sums the walk reads (model_state.hpp)
  Dims dims_;
  Sym tokens_;  // the tokens of the residual stream (N/t under sequence parallelism)
  FsdpWalk fsdp_;
  Residency residency_;
  MomentWriter writer_;
  InBackward in_backward_;
  OptimizerSizes optimizer_;
  bool master_grads_ = false;  // master weights with lower-precision gradients: grad_copy
  u64 param_bytes_ = 0;        // the whole model's parameters (parameter_bytes), taken once
  StateTensors state_;
  LayerWeightCopies copies_;
  StepScalars scalars_;
  AttentionTemporaries attention_;
  // The saved tensors grouped by scope (those of scope s at [scope_start_[s],
  // scope_start_[s + 1]) of lists_.by_scope), then those of a walk layer (its scope and its
  // MLP's), in step order; the rules' tensors and stashed entries.
  WalkLists lists_;
  std::array<std::uint32_t, kScopeCount + 1> scope_start_{};
  std::span<const std::uint32_t> layer_tensors() const {
    return std::span(lists_.by_scope).subspan(scope_start_[kScopeCount]);
  }
  // Entries the walk writes alike in many moments: written once, then copied while every entry
  // is whole on the device (the residency then places an entry alike in every moment). `key`
  // tells apart what one block holds at different calls (a layers() block's first and count).
  struct Block {
    std::uint32_t begin = 0, end = 0;
    bool written = false;
    u64 first = 0, count = 0;  // a layers() block's key
  };
  template <typename Write>
  void block(Block& b, u64 first, u64 count, Write&& write) {
    const bool whole = residency_.everything_whole();
    if (whole && b.written && b.first == first && b.count == count)
      return writer_.repeat(b.begin, b.end);
    const std::uint32_t begin = writer_.size();
    write();
    b = {begin, writer_.size(), whole, first, count};
  }
  // [0] the layers below the current one (first 0), [1] the current one.
  std::array<Block, 2> layers_blocks_{};
  // baseline()'s model state, by (optimizer states, all gradients).
  std::array<Block, 4> baseline_blocks_{};
  Block embed_and_shared_block_;
  bool has_norm1_ = false;  // a layer keeps tensors of its first norm (not a parallel block)
  std::span<const std::uint32_t> by_scope(Scope s) const {
    const auto i = static_cast<std::size_t>(s);
    return std::span(lists_.by_scope)
        .subspan(scope_start_[i], scope_start_[i + 1] - scope_start_[i]);
  }
  std::array<std::uint16_t, 2> lived_kinds_{};  // per anchor: the moments some of them live at
  // The one tensor every constant of no bytes is (Walker::constant), once created.
  static constexpr std::uint32_t kNoTensor = UINT32_MAX;
  std::uint32_t empty_ = kNoTensor;
  // The walk being built: which step, and whether it is the timeline (every layer's moments).
  StepOf step_of_ = StepOf::steady;
  bool timeline_ = false;
};

// The saved tensors of layers [first, first + count), except those whose slot `freed` says
// are released; the first layer lacks those kept only for its input's gradient.
template <typename Freed>
void Walker::layers(u64 first, u64 count, Freed&& freed) {
  if (count == 0) return;  // the layers below the first: none
  for (const std::uint32_t i : layer_tensors()) {
    const bool skip = step_.tensors[i].skips_first && first == 0 && count > 0;
    if (!freed(step_.tensors[i].slot)) writer_.add(i, count - (skip ? 1 : 0));
  }
}

}  // namespace memest::detail
