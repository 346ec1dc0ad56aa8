// Private to the core: where each entry of a moment is, and the writer that enters tensors into
// the moments of a walk (docs/design.md, "Splitting entries over ranks").
#pragma once

#include "step/rules/rules.hpp"

#include <memest/activation.hpp>
#include <memest/parallel.hpp>
#include <memest/step.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace memest::detail {

/// What the residency knows of the moment an entry is entered in.
struct EntryContext {
  /// Inside the optimizer step: the step's temporaries are its tensors of part `other`.
  bool optimizer_phase = false;
  /// The saved tensors being entered are the forward pass's, which activation offloading
  /// keeps on the host.
  bool saved_tensors = false;
};

/// Where an entry is: not on the device at all, or there whole or as one of `ranks` shares.
struct Placement {
  bool on_device = true;
  std::uint32_t ranks = 1;
};

/// Decides per entry where a tensor is. Every reason a tensor is elsewhere than whole on the
/// device is one rule, and the first that decides wins: activation offloading, ZeRO-Offload of
/// the optimizer, parameter offload, ZeRO's sharding. Sharding is decided per entry from the
/// tensor's scope and part, never by scaling a moment.
class Residency {
 public:
  /// `in` says whether activations are offloaded.
  Residency(const Sharding& sharding, const ActivationInputs& in)
      : sharding_(sharding),
        offload_activations_(in.offload),
        everything_whole_(!in.offload && !sharding.offload && !sharding.offload_params &&
                          !sharding.states && !sharding.grads && !sharding.params) {}

  Placement place(const Tensor& t, std::uint32_t id, const EntryContext& c) const {
    if (everything_whole_) return {true, 1};  // no rule below applies
    const bool step_temporary = c.optimizer_phase && t.part == Part::other && id != kept_;
    if (activation_offloaded(t, c) || optimizer_offloaded(t, step_temporary) ||
        parameter_offloaded(t))
      return {false, 1};
    return {true, zero_ranks(t, step_temporary)};
  }
  /// A tensor of part `other` that is no temporary of the optimizer step, even in its phase
  /// (DDP's buckets).
  void not_a_step_temporary(std::uint32_t id) { kept_ = id; }
  const Sharding& sharding() const { return sharding_; }
  /// Whether every entry is whole on the device, wherever it is entered.
  bool everything_whole() const { return everything_whole_; }

 private:
  // Activation offloading (src/step/rules/activation_offload.cpp): saved tensors in pinned host
  // memory.
  bool activation_offloaded(const Tensor& t, const EntryContext& c) const {
    return offload_activations_ && c.saved_tensors && offloadable(t);
  }
  // ZeRO-Offload: master weights, optimizer states, master gradients and the optimizer step
  // are held and stepped on the host.
  bool optimizer_offloaded(const Tensor& t, bool step_temporary) const {
    return sharding_.offload && (t.part == Part::master_params || t.part == Part::optimizer_state ||
                                 t.part == Part::master_grads || step_temporary);
  }
  // Parameter offload: the parameter and gradient shards on the host as well.
  bool parameter_offloaded(const Tensor& t) const {
    return sharding_.offload_params && t.scope == Scope::state &&
           (t.part == Part::params || t.part == Part::grads);
  }
  // ZeRO (Rajbhandari et al. 2020): a rank keeps 1/ranks of each sharded state. Only
  // state-scope tensors are shares: a gradient or copy in flight inside an op is whole on every
  // rank.
  std::uint32_t zero_ranks(const Tensor& t, bool step_temporary) const {
    if (t.scope != Scope::state) return 1;
    const Part p = t.part;
    const Sharding& sh = sharding_;
    const bool sharded =
        (sh.states && (p == Part::master_params || p == Part::optimizer_state || step_temporary)) ||
        (sh.grads && (p == Part::grads || p == Part::master_grads || p == Part::grad_accum)) ||
        (sh.params && p == Part::params);
    return sharded ? static_cast<std::uint32_t>(sh.ranks) : 1;
  }

  Sharding sharding_;
  bool offload_activations_ = false;
  bool everything_whole_ = false;  // nothing offloaded or sharded: every entry whole on the device
  std::uint32_t kept_ = UINT32_MAX;
};

/// Enters tensors into the moments of a walk, each where the residency places it.
class MomentWriter {
 public:
  MomentWriter(Step& step, const Residency& residency) : step_(step), residency_(residency) {}

  /// The list the next moments go to (Step::steady, Step::first, Step::timeline).
  void into(std::vector<MomentSpec>& walk) { walk_ = &walk; }
  void begin(MomentId id, std::int32_t layer) {
    context_.optimizer_phase = phase_of(id.kind) == Phase::optimizer;
    walk_->push_back({id, static_cast<std::uint32_t>(step_.entries.size()), 0, layer});
  }
  void end() { walk_->back().end = static_cast<std::uint32_t>(step_.entries.size()); }
  MomentId current() const { return walk_->back().id; }
  /// Takes the layer index off the moment being written (a timeline moment of no layer).
  void unindex() { walk_->back().layer = -1; }

  /// The number of entries written so far.
  std::uint32_t size() const { return static_cast<std::uint32_t>(step_.entries.size()); }
  /// Enters again the entries [begin, end) written before, in their order.
  void repeat(std::uint32_t begin, std::uint32_t end) {
    std::vector<Entry>& v = step_.entries;
    const std::size_t size = v.size() + (end - begin);
    if (size > v.capacity()) v.reserve(std::max(size, 2 * v.capacity()));
    // Appended one by one into the capacity reserved: no default entries written first.
    for (std::uint32_t i = begin; i < end; ++i) v.push_back(v[i]);
  }
  /// `count` copies of tensor `id`; nothing when the tensor is empty.
  void add(std::uint32_t id, std::uint64_t count = 1) { enter(id, count, false); }
  /// Entered even when empty (the optimizer's tensors, which a plan may resize).
  void add_kept(std::uint32_t id) { enter(id, 1, true); }
  /// Enters the forward pass's saved tensors that `f` adds (activation offloading keeps them on
  /// the host).
  template <typename F>
  void saved_tensors(F&& f) {
    context_.saved_tensors = true;
    f();
    context_.saved_tensors = false;
  }

 private:
  void enter(std::uint32_t id, std::uint64_t count, bool keep) {
    const Tensor& t = step_.tensors[id];
    if (count == 0 || (t.empty() && !keep)) return;
    const Placement p = residency_.place(t, id, context_);
    if (p.on_device) step_.entries.push_back({id, p.ranks, count});
  }

  Step& step_;
  const Residency& residency_;
  std::vector<MomentSpec>* walk_ = nullptr;
  EntryContext context_;
};

}  // namespace memest::detail
