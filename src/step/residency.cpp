// Where each entry of a moment is. Every reason a tensor is elsewhere than whole on the device
// is one rule; the first that decides wins. Sharding is decided per entry from the tensor's
// scope and part, never by scaling a moment (docs/design.md, "Splitting entries over ranks").
#include "step/residency.hpp"

#include "step/rules/rules.hpp"

#include <array>
#include <optional>

namespace memest::detail {
namespace {

// What the rules read of an entry besides its tensor.
struct EntryFacts {
  bool step_temporary = false;  // a temporary of the optimizer step
  bool saved_tensors = false;   // one of the forward pass's saved tensors, being entered as such
};

using ResidencyRule = std::optional<Placement> (*)(const Tensor&, const EntryFacts&,
                                                   const Sharding&, bool offload_activations);

constexpr Placement kHost{false, 1};

// Activation offloading (rules/activation_offload.cpp): saved tensors in pinned host memory.
std::optional<Placement> activation_offload(const Tensor& t, const EntryFacts& f, const Sharding&,
                                            bool offload_activations) {
  if (offload_activations && f.saved_tensors && offloadable(t)) return kHost;
  return std::nullopt;
}

// ZeRO-Offload: master weights, optimizer states, master gradients and the optimizer step are
// held and stepped on the host.
std::optional<Placement> optimizer_offload(const Tensor& t, const EntryFacts& f, const Sharding& sh,
                                           bool) {
  const bool host_part = t.part == Part::master_params || t.part == Part::optimizer_state ||
                         t.part == Part::master_grads || f.step_temporary;
  if (sh.offload && host_part) return kHost;
  return std::nullopt;
}

// Parameter offload: the parameter and gradient shards on the host as well.
std::optional<Placement> parameter_offload(const Tensor& t, const EntryFacts&, const Sharding& sh,
                                           bool) {
  const bool model_state =
      t.scope == Scope::state && (t.part == Part::params || t.part == Part::grads);
  if (sh.offload_params && model_state) return kHost;
  return std::nullopt;
}

// ZeRO (Rajbhandari et al. 2020): a rank keeps 1/ranks of each sharded state. Only state-scope
// tensors are shares: a gradient or copy in flight inside an op is whole on every rank.
std::optional<Placement> zero_sharding(const Tensor& t, const EntryFacts& f, const Sharding& sh,
                                       bool) {
  if (t.scope != Scope::state) return Placement{};
  const Part p = t.part;
  const bool sharded =
      (sh.states && (p == Part::master_params || p == Part::optimizer_state || f.step_temporary)) ||
      (sh.grads && (p == Part::grads || p == Part::master_grads || p == Part::grad_accum)) ||
      (sh.params && p == Part::params);
  return Placement{true, sharded ? static_cast<std::uint32_t>(sh.ranks) : 1};
}

constexpr std::array<ResidencyRule, 4> kResidencyRules = {activation_offload, optimizer_offload,
                                                          parameter_offload, zero_sharding};

}  // namespace

Placement Residency::place(const Tensor& t, std::uint32_t id, const EntryContext& c) const {
  const EntryFacts facts{c.optimizer_phase && t.part == Part::other && id != kept_,
                         c.saved_tensors};
  for (const ResidencyRule rule : kResidencyRules) {
    if (const auto p = rule(t, facts, sharding_, offload_activations_)) return *p;
  }
  return Placement{};
}

void MomentWriter::begin(MomentId id, std::int32_t layer) {
  context_.optimizer_phase = phase_of(id.kind) == Phase::optimizer;
  walk_->push_back({id, static_cast<std::uint32_t>(step_.entries.size()), 0, layer});
}

void MomentWriter::end() { walk_->back().end = static_cast<std::uint32_t>(step_.entries.size()); }

void MomentWriter::enter(std::uint32_t id, std::uint64_t count, bool keep) {
  const Tensor& t = step_.tensors[id];
  if (count == 0 || (t.empty() && !keep)) return;
  const Placement p = residency_.place(t, id, context_);
  if (p.on_device) step_.entries.push_back({id, p.ranks, count});
}

}  // namespace memest::detail
