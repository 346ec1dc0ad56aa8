// Private to the core: the techniques users turn on that change what a step saves and where it
// lives (docs/techniques.md): per-op selective checkpointing, torch.compile, activation
// offloading, the optimizer step in backward.
#pragma once

#include <memest/activation.hpp>
#include <memest/step.hpp>

#include <cstdint>
#include <vector>

namespace memest::detail {

struct ParameterSums;

/// Per-op selective checkpointing (torchtitan selective_ac_option "op"): the outputs each
/// checkpointed layer caches besides its input, as Scope::checkpoint tensors (every other mm's
/// output and the attention kernel's outputs).
void add_op_cached_tensors(Step& step, const ActivationInputs& in);

/// torch.compile of each layer: the saved tensors Inductor's partitioner recomputes instead
/// (pointwise results of saved tensors) leave the saved set, and an RMSNorm keeps its input in
/// the model dtype rather than its fp32 copy. Call before Step::saved is counted.
void apply_compile(Step& step, const ActivationInputs& in);

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

/// The device's copies of offloaded tensors during forward: the last kOffloadStash offloaded
/// saved tensors, taken as the largest of the layers' (an upper bound; their order of saving
/// is not modelled). Entries of (tensor, count).
std::vector<Entry> offload_stash(const Step& step, const ActivationInputs& in);

/// The largest trainable tensor of a layer, of the head (after the layers) and of the
/// embedding, in elements: the gradient the optimizer in backward steps at a time.
struct LargestTensors {
  std::uint64_t layer = 0, head = 0, embed = 0;
};
LargestTensors largest_tensors(const ParameterSums& lay);

}  // namespace memest::detail
