// Private to the core: framework behaviours that change which tensors a step has or when they
// die, one rule per file in this folder (docs/design.md, "Framework behaviours as rules").
#pragma once

#include "step/step_build.hpp"

#include <memest/activation.hpp>
#include <memest/step.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace memest::detail {

/// What requires grad inside a layer whose input does (`input`) or does not, and so what its
/// ops keep for backward: a frozen linear keeps no input, an op without an input that requires
/// grad keeps nothing (docs/activations.md, "Frozen weights and LoRA"). The *_keeps_input
/// fields say whether a linear keeps its input; the others whether a tensor requires grad.
struct LayerFlow {
  bool input = true;             ///< the layer input
  bool norm1 = true;             ///< the first norm's output
  bool qkv_keeps_input = true;   ///< q/k/v keep their input (the norm output)
  bool core = true;              ///< q, k or v (the attention core's inputs)
  bool o_keeps_input = true;     ///< o_proj keeps its input (the attention output)
  bool attention_out = true;     ///< the attention block's output
  bool residual1 = true;         ///< the residual stream after attention
  bool norm2 = true;             ///< the second norm's output (the MLP input)
  bool mlp_keeps_input = true;   ///< gate/up keep their input
  bool gate_out = true;          ///< the MLP's first matmul outputs (gate, up or fc)
  bool down_keeps_input = true;  ///< the down projection keeps its input
  bool mlp_out = true;           ///< the MLP's output
};

/// When a rule's tensor is live, in the step's time order (MomentKind's order): at every
/// moment from `from` to `to`, both included, except those in `except`. A span whose `to`
/// comes before its `from` is carried into the next step: a steady step holds the tensor from
/// `from` to its end and from its start to `to`; the first step, which has no step before it,
/// from `from` only.
struct Lifetime {
  MomentKind from = MomentKind::forward_attention;
  MomentKind to = MomentKind::zero_grad;
  std::uint16_t except = 0;  ///< moments of the span it is not entered at (bit 1 << kind)

  /// The moments of a step it is live at, one bit (1 << kind) each.
  std::uint16_t moments(StepOf step) const;
  bool live_at(MomentKind kind, StepOf step) const;
};

/// One moment only.
constexpr Lifetime only_at(MomentKind kind) { return {kind, kind, 0}; }
/// A moment's bit in Lifetime::except.
constexpr std::uint16_t bit(MomentKind kind) {
  return static_cast<std::uint16_t>(1U << static_cast<unsigned>(kind));
}

/// Where in a moment's list of tensors a rule's tensor is entered (the order of a moment's
/// tensors is the order --explain lists them and the allocator's replay allocates them).
enum class Anchor : std::uint8_t {
  state,  ///< first, with the model state
  loss,   ///< where the loss's tensors are: after the weight copies and the gradients
};

/// Whether a rule's tensor is one allocation over its whole life (created with the walk's
/// state tensors), or a new tensor at each moment (the replay frees it and allocates the next
/// one between two moments).
enum class Identity : std::uint8_t { one, per_moment };

/// A tensor a rule adds to the moments of its lifetime.
struct Lived {
  Tensor tensor;  ///< name, part, scope, width, shape, batch (sized when the walk creates it)
  Lifetime life;
  Anchor anchor = Anchor::loss;
  Identity identity = Identity::per_moment;
};

/// A framework behaviour as a rule: when it applies, and what it does to a layer's flow of
/// gradients, to the saved tensors the layer graph built, to the moments of the walk, and to
/// what the device holds of saved tensors kept elsewhere. Each hook may be null.
struct Rule {
  std::string_view name;  ///< the behaviour, as docs/design.md lists it
  bool (*applies)(const ActivationInputs& in) = nullptr;
  /// Changes what requires grad or what a linear keeps, before a layer's tensors are added.
  void (*flow)(LayerFlow& flow, const ActivationInputs& in) = nullptr;
  /// Edits the saved tensors after the layer graph, before they are counted (Step::saved).
  void (*saved)(Step& step, const ActivationInputs& in) = nullptr;
  /// Appends the tensors it adds to moments, with their lifetimes.
  void (*lived)(std::vector<Lived>& out, const ActivationInputs& in) = nullptr;
  /// Appends saved tensors the device holds wherever the saved tensors are entered, besides
  /// those the residency leaves on the device (src/step/residency.hpp).
  void (*stash)(std::vector<Entry>& out, const Step& step, const ActivationInputs& in) = nullptr;
};

/// The rules, in the order they apply (src/step/rules/rules.cpp).
std::span<const Rule* const> step_rules();

/// Each applying rule's hook, in order.
void apply_flow_rules(LayerFlow& flow, const ActivationInputs& in);
void apply_saved_rules(Step& step, const ActivationInputs& in);
/// The rules' lived tensors and stashed entries, into `out` (emptied first: a walk reuses it).
void lived_tensors(std::vector<Lived>& out, const ActivationInputs& in);
void stashed_entries(std::vector<Entry>& out, const Step& step, const ActivationInputs& in);

// For rules that edit the saved tensors (before Step::saved and any index are taken).

/// Inserts `tensor` at position `at` of Step::tensors; returns `at`.
std::uint32_t insert_tensor(Step& step, std::size_t at, const Tensor& tensor);
/// The first tensor for which `pred` holds, or Step::tensors.size().
template <typename Pred>
std::size_t find_tensor(const Step& step, Pred&& pred) {
  std::size_t i = 0;
  while (i < step.tensors.size() && !pred(step.tensors[i])) ++i;
  return i;
}

// The rules one by one (a file each).
extern const Rule kOpCheckpointRule;
extern const Rule kLossRule;
extern const Rule kSoftmaxKeepsInputRule;
extern const Rule kLitgptModulesRule;
extern const Rule kNf4KeepsInputRule;
extern const Rule kCompileRule;
extern const Rule kLoopKeepsOutputRule;
extern const Rule kActivationOffloadRule;

/// The bytes per element of the logits the model's forward returns (src/step/rules/loss.cpp).
std::uint64_t output_logits_width(const ActivationInputs& in);

// Activation offloading (src/step/rules/activation_offload.cpp): where saved tensors are, a
// rule of the residency (src/step/residency.hpp) rather than of the tensors.

/// torchtune's OffloadActivations moves a saved tensor to host memory when it has at least
/// this many bytes (min_offload_size).
inline constexpr std::uint64_t kMinOffloadBytes = 1024;
/// ... and keeps the last this many offloaded tensors alive on the device until their copy is
/// done (max_fwd_stash_size).
inline constexpr std::uint64_t kOffloadStash = 5;

/// Whether activation offloading moves a saved tensor to the host: every saved tensor of at
/// least kMinOffloadBytes bytes, except the output head's input (torchtune opts the output
/// linear out with NoOpManager) and the loss's (computed outside the offloading context).
bool offloadable(const Tensor& t);

}  // namespace memest::detail
