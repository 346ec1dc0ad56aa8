// PyTorch before 1.11 (--softmax-keeps-input): softmax and log_softmax kept their input for
// backward besides their output (the derivative formula named `self`; pytorch/pytorch issue
// #64000, fixed by PR #65242 for 1.11): eager attention keeps the scores in softmax's dtype, and
// the losses of that time (transformers', hf and hf-upcast) keep the fp32 logits.
#include "step/rules/rules.hpp"

namespace memest::detail {
namespace {

// Keeps each softmax output's input beside it: the same size and the same lifetime (scope,
// slot, first layer), since _softmax_backward_data(grad, result, dim, self) reads both.
void keep_softmax_inputs(Step& step, const ActivationInputs& in) {
  for (std::size_t i = 0; i < step.tensors.size(); ++i) {
    const Tensor& t = step.tensors[i];
    if (t.part != Part::activations || t.slot != Slot::sm) continue;
    Tensor input = t;
    input.name = "softmax input, the scores in softmax's dtype (PyTorch < 1.11)";
    insert_tensor(step, ++i, input);
  }
  const bool log_softmax = in.loss == Loss::hf || in.loss == Loss::hf_upcast;
  const std::size_t out = find_tensor(
      step, [](const Tensor& t) { return t.scope == Scope::head && t.slot == Slot::log_probs; });
  if (!log_softmax || out == step.tensors.size()) return;
  insert_tensor(step, out + 1,
                Tensor{.name = "log_softmax input, the fp32 logits (PyTorch < 1.11)",
                       .part = Part::activations,
                       .scope = Scope::head,
                       .width = 4,
                       .shape = step.tensors[out].shape});
}

}  // namespace

const Rule kSoftmaxKeepsInputRule = {
    .name = "softmax_keeps_input",
    .applies = [](const ActivationInputs& in) { return in.softmax_keeps_input; },
    .saved = keep_softmax_inputs,
};

}  // namespace memest::detail
