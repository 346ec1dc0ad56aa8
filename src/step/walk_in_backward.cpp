// When the gradients live, and the optimizer step in backward (--optimizer-in-backward:
// torchtune's optimizer_in_bwd; docs/techniques.md): each parameter has an optimizer of its own,
// stepped by a post-accumulate-grad hook as its gradient is accumulated, and its gradient is
// then set to None, so no gradient outlives its step and the step has no optimizer phase.
#include "step/walk.hpp"

#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {
namespace {

// The largest trainable tensor of a layer, of the head (after the layers) and of the embedding,
// in elements: the gradient the optimizer in backward steps at a time.
std::array<u64, 3> largest_tensors(const ParameterSums& sums) {
  std::array<u64, 3> out{};  // layer, head, embedding
  bool seen_block = false;
  for (const TensorGroup& g : sums.inventory->groups) {
    if (g.quant_state) continue;
    const bool layer = sums.per_layer(g);
    seen_block = seen_block || layer;
    if (!g.trainable) continue;
    u64& slot = out[layer        ? InBackward::kLayer
                    : seen_block ? InBackward::kHead
                                 : InBackward::kEmbedding];
    slot = std::max(slot, g.tensor_elements());
  }
  return out;
}

}  // namespace

void InBackward::create_tensors(Step& step, const RunSpec& run, const ActivationInputs& in,
                                const ParameterSums& sums, const OptimizerSizes& sizes,
                                bool tied_grad) {
  if (!on_) return;
  const u64 eg = width(run.precision.grad);
  const std::array<u64, 3> n = largest_tensors(sums);
  static constexpr std::array<std::string_view, 3> kGrad = {
      "gradient being applied (the layer's largest tensor)",
      "gradient being applied (the head's largest tensor)", "gradient being applied (embedding)"};
  for (std::size_t i = 0; i < 3; ++i) {
    grad_[i] = add_tensor(step, kGrad[i], Part::grads, Scope::transient, Slot::none,
                          checked_mul(eg, n[i]), shape({}));
    temporaries_[i] =
        add_tensor(step, sizes.temporaries_name, Part::other, Scope::state, Slot::none,
                   one_tensor_temporaries(run, run.optimizer, n[i], in.cuda), shape({}));
  }
  tied_buffer_ = add_tensor(
      step, "lm_head's gradient of the tied embedding (held until the embedding's)", Part::grads,
      Scope::state, Slot::none, tied_grad && in.lm_head ? eg * in.V * in.h : 0, shape({}));
}

void InBackward::step(MomentWriter& writer, Stepped which) const {
  writer.add(grad_[which]);
  writer.add(temporaries_[which]);
}

// Whether every gradient is live through the step: kept from the previous step (zero_grad
// without set_to_none) or between the micro-batches of an accumulation, unless each is applied
// and freed in backward.
bool Walker::grads_live() const {
  if (in_backward_.on()) return false;
  const auto& t = run_.training;
  return (step_of_ == StepOf::steady && !t.grads_set_to_none) || t.grad_accum > 1;
}

// Inside layer j's backward, the gradients made so far when they do not live through the step:
// the head's and those of the layers above j; with the optimizer in backward, only a tied
// lm_head's, which waits for the embedding's.
void Walker::gradients_of_layers_above(u64 j) {
  if (in_backward_.on()) {
    writer_.add(in_backward_.tied_buffer());
    return;
  }
  if (grads_live()) return;
  writer_.add(state_.head_grads);
  writer_.add(state_.layer_grads, in_.L - 1 - j);
}

// After the head's backward: its weight's step (an untied lm_head), the log-probs freed.
void Walker::head_step_in_backward() {
  if (!in_backward_.on() || tied_grad() || sums_.head_trainable == 0) return;
  begin(MomentKind::head_step_in_backward);
  baseline(AllGrads::no);
  writer_.saved_tensors([&] {
    for (const Entry& e : step_.saved) {
      if (step_.tensors[e.tensor].scope != Scope::head) writer_.add(e.tensor, e.count);
    }
  });
  stash();
  writer_.add(
      temp("gradient of the lm_head input", Part::other, in_.ex, shape({tokens_, dims_.h})));
  in_backward_.step(writer_, InBackward::kHead);
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  writer_.add(scalars_.rng_states);
  writer_.end();
}

// The down projection's step, as its gradient is accumulated.
void Walker::layer_step_in_backward(u64 j) {
  if (!in_backward_.on()) return;
  begin(MomentKind::layer_step_in_backward, j);
  layer_backward_base(j);
  layers(j, 1);
  layer_copies(1);
  in_backward_.step(writer_, InBackward::kLayer);
  writer_.end();
}

// The embedding's step, the last of the backward.
void Walker::embedding_step_in_backward() {
  if (!in_backward_.on() || sums_.embed_trainable == 0) return;
  begin(MomentKind::embedding_step_in_backward);
  baseline(AllGrads::no);
  in_backward_.step(writer_, InBackward::kEmbedding);
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  writer_.end();
}

}  // namespace memest::detail
