// The list of rules and what they share: lifetimes, and editing the saved tensors.
#include "step/rules/rules.hpp"

#include "step/step_build.hpp"

#include <array>

namespace memest::detail {
namespace {

// The order the rules apply in. A rule that inserts a saved tensor beside another needs that
// one to exist: the loss's saved tensors come before softmax_keeps_input, which keeps the
// log_softmax's input beside them; litgpt_modules renames what compile reads by name, which
// is harmless in either order.
const std::array<const Rule*, 8> kRules = {
    &kOpCheckpointRule,  &kLossRule,    &kSoftmaxKeepsInputRule, &kLitgptModulesRule,
    &kNf4KeepsInputRule, &kCompileRule, &kLoopKeepsOutputRule,   &kActivationOffloadRule};

}  // namespace

std::uint16_t Lifetime::moments(StepOf step) const {
  const auto f = static_cast<unsigned>(from), t = static_cast<unsigned>(to);
  const unsigned all = (1U << kMomentKindCount) - 1;
  const unsigned from_on = all & ~((1U << f) - 1);  // from `from` to the end of the step
  const unsigned up_to = (2U << t) - 1;             // from the start of the step to `to`
  // Carried into the next step: a steady step holds what the step before it left.
  const unsigned span = f <= t                   ? from_on & up_to
                        : step == StepOf::steady ? from_on | up_to
                                                 : from_on;
  return static_cast<std::uint16_t>(span & ~unsigned{except});
}

bool Lifetime::live_at(MomentKind kind, StepOf step) const {
  return (moments(step) & bit(kind)) != 0;
}

std::span<const Rule* const> step_rules() { return kRules; }

void apply_flow_rules(LayerFlow& flow, const ActivationInputs& in) {
  for (const Rule* r : kRules) {
    if (r->flow && r->applies(in)) r->flow(flow, in);
  }
}

void apply_saved_rules(Step& step, const ActivationInputs& in) {
  for (const Rule* r : kRules) {
    if (r->saved && r->applies(in)) r->saved(step, in);
  }
}

void lived_tensors(std::vector<Lived>& out, const ActivationInputs& in) {
  out.clear();
  for (const Rule* r : kRules) {
    if (r->lived && r->applies(in)) r->lived(out, in);
  }
}

void stashed_entries(std::vector<Entry>& out, const Step& step, const ActivationInputs& in) {
  out.clear();
  for (const Rule* r : kRules) {
    if (r->stash && r->applies(in)) r->stash(out, step, in);
  }
}

std::uint32_t insert_tensor(Step& step, std::size_t at, const Tensor& tensor) {
  step.tensors.insert(step.tensors.begin() + static_cast<std::ptrdiff_t>(at), make_tensor(tensor));
  return static_cast<std::uint32_t>(at);
}

}  // namespace memest::detail
