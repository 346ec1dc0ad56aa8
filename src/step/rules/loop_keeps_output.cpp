// A training loop that keeps the model's output (--loop-keeps-output): `output = model(...)`
// holds the output's logits from the assignment after forward to the next forward's return, so
// they are live through backward and the optimizer step, and the previous step's are live
// through the next forward, at the loss beside the new ones (Answer.AI's fsdp_qlora train.py at
// 50efa1e, lines 821-843). The Hugging Face Trainer does not: compute_loss returns the loss
// alone.
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

namespace memest::detail {
namespace {

void held_output(std::vector<Lived>& out, const ActivationInputs& in) {
  out.push_back({
      .tensor = {.name = "logits of the model's output, held by the training loop",
                 .part = Part::other,
                 .scope = Scope::state,
                 .width = output_logits_width(in),
                 .shape = shape({sym::N, Dims(in).V})},
      // From the assignment (after the loss's forward) to the next step's forward end: carried.
      .life = {MomentKind::backward_start, MomentKind::forward_end},
      .anchor = Anchor::state,
      .identity = Identity::one,
  });
}

}  // namespace

const Rule kLoopKeepsOutputRule = {
    .name = "loop_keeps_output",
    .applies = [](const ActivationInputs& in) { return in.keeps_output && in.lm_head; },
    .lived = held_output,
};

}  // namespace memest::detail
