// Private to the core: where each entry of a moment is, and the writer that enters tensors into
// the moments of a walk (docs/design.md, "Splitting entries over ranks").
#pragma once

#include <memest/activation.hpp>
#include <memest/parallel.hpp>
#include <memest/step.hpp>

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

/// Decides per entry where a tensor is, by rules applied in order (residency.cpp): activation
/// offloading, ZeRO-Offload of the optimizer, parameter offload, ZeRO's sharding.
class Residency {
 public:
  /// `in` says whether activations are offloaded.
  Residency(const Sharding& sharding, const ActivationInputs& in)
      : sharding_(sharding), offload_activations_(in.offload) {}

  Placement place(const Tensor& t, std::uint32_t id, const EntryContext& context) const;
  /// A tensor of part `other` that is no temporary of the optimizer step, even in its phase
  /// (DDP's buckets).
  void not_a_step_temporary(std::uint32_t id) { kept_ = id; }
  const Sharding& sharding() const { return sharding_; }

 private:
  Sharding sharding_;
  bool offload_activations_ = false;
  std::uint32_t kept_ = UINT32_MAX;
};

/// Enters tensors into the moments of a walk, each where the residency places it.
class MomentWriter {
 public:
  MomentWriter(Step& step, const Residency& residency) : step_(step), residency_(residency) {}

  /// The list the next moments go to (Step::steady, Step::first, Step::timeline).
  void into(std::vector<MomentSpec>& walk) { walk_ = &walk; }
  void begin(MomentId id, std::int32_t layer);
  void end();
  MomentId current() const { return walk_->back().id; }
  /// Takes the layer index off the moment being written (a timeline moment of no layer).
  void unindex() { walk_->back().layer = -1; }

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
  void enter(std::uint32_t id, std::uint64_t count, bool keep);

  Step& step_;
  const Residency& residency_;
  std::vector<MomentSpec>* walk_ = nullptr;
  EntryContext context_;
};

}  // namespace memest::detail
