// Private to the core: the caching allocator replayed over a run's step
// (src/replay/allocator_step.cpp).
#pragma once

#include <memest/allocator_replay.hpp>
#include <memest/run_spec.hpp>
#include <memest/shape.hpp>
#include <memest/step.hpp>

namespace memest::detail {

/// Replays PyTorch's CUDA caching allocator (include/memest/allocator_replay.hpp) over the
/// allocations and frees of model loading and two training steps of `step` at the point `x`
/// (docs/activations.md, "Allocator and context"). `L` is the number of layers of the walk.
AllocatorReplay replay_allocator(const RunSpec& run, const Step& step, std::uint64_t L,
                                 const Basis& x);

}  // namespace memest::detail
