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

bool Lifetime::live_at(MomentKind kind, StepOf step) const {
  if (except & bit(kind)) return false;
  if (from <= to) return from <= kind && kind <= to;
  // Carried into the next step: a steady step holds what the step before it left.
  return kind >= from || (step == StepOf::steady && kind <= to);
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

std::vector<Lived> lived_tensors(const ActivationInputs& in) {
  std::vector<Lived> out;
  for (const Rule* r : kRules) {
    if (r->lived && r->applies(in)) r->lived(out, in);
  }
  return out;
}

std::vector<Entry> stashed_entries(const Step& step, const ActivationInputs& in) {
  std::vector<Entry> out;
  for (const Rule* r : kRules) {
    if (r->stash && r->applies(in)) r->stash(out, step, in);
  }
  return out;
}

std::uint32_t insert_tensor(Step& step, std::size_t at, const Tensor& tensor) {
  step.tensors.insert(step.tensors.begin() + static_cast<std::ptrdiff_t>(at), make_tensor(tensor));
  return static_cast<std::uint32_t>(at);
}

}  // namespace memest::detail
