// Activation offloading (--offload activations: torchtune's OffloadActivations;
// docs/techniques.md): the saved tensors of the forward pass go to pinned host memory and come
// back for backward. Where a tensor is, is the residency's to say (src/step/residency.hpp asks
// offloadable()); what the device keeps of them meanwhile is this rule's stash.
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <algorithm>
#include <utility>

namespace memest::detail {

bool offloadable(const Tensor& t) {
  if (t.part != Part::activations) return false;
  if (t.bytes.constant() && t.bytes.c[0] < kMinOffloadBytes) return false;
  // The head's saved tensors stay, except the final norm's (inside the model's forward).
  if (t.scope == Scope::head) return t.name.starts_with("final ");
  return true;
}

namespace {

// The device's copies of offloaded tensors during forward: the last kOffloadStash offloaded
// saved tensors, taken as the largest of the layers' (an upper bound; their order of saving is
// not modelled).
void offload_stash(std::vector<Entry>& out, const Step& step, const ActivationInputs& in) {
  const Basis x = basis_at(in.b ? in.b : 1, in.s ? in.s : 1024);
  const bool ck = checkpointed(in.recompute);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> sizes;  // (bytes, tensor)
  for (const Entry& e : step.saved) {
    const Tensor& t = step.tensors[e.tensor];
    const bool layer =
        t.scope == Scope::layer || t.scope == Scope::dense_mlp || t.scope == Scope::moe_mlp;
    const bool per_layer = ck ? t.scope == Scope::checkpoint : layer;
    if (per_layer && offloadable(t) && t.exists_at(x)) sizes.emplace_back(t.bytes.at(x), e.tensor);
  }
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // kOffloadStash consecutive saved tensors hold one tensor of a layer at most
  // ceil(kOffloadStash / m) times, m the tensors a layer offloads (5 layer inputs under full
  // checkpointing, one copy each of the 5 largest when a layer saves 5 or more).
  if (sizes.empty()) return;
  std::uint64_t left = kOffloadStash;
  const std::uint64_t m = sizes.size();
  const std::uint64_t per_tensor = std::min<std::uint64_t>(in.L, (kOffloadStash + m - 1) / m);
  for (const auto& [bytes, id] : sizes) {
    if (left == 0) break;
    const std::uint64_t n = std::min<std::uint64_t>(per_tensor, left);
    out.push_back({id, 1, n});
    left -= n;
  }
}

}  // namespace

const Rule kActivationOffloadRule = {
    .name = "activation_offload",
    .applies = [](const ActivationInputs& in) { return in.offload; },
    .stash = offload_stash,
};

}  // namespace memest::detail
