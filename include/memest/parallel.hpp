#pragma once

#include <cstdint>

namespace memest {

/// Data parallelism with ZeRO (Rajbhandari et al. 2020) sharding of the model states across
/// the data-parallel ranks. Stage 1 shards the optimizer states and master weights, stage 2
/// also the gradients, stage 3 also the parameters (FSDP FULL_SHARD; SHARD_GRAD_OP is stage 2).
/// Activations are per micro-batch and are not sharded.
struct ParallelSpec {
  std::uint64_t data_parallel = 1;  ///< ranks the states are sharded over
  unsigned zero_stage = 0;          ///< 0 (replicated), 1, 2 or 3
  /// ZeRO-Offload (Ren et al. 2021): the master weights, optimizer states and their gradients
  /// live in host memory and the optimizer steps on the CPU; the device keeps the model's
  /// parameters, gradients and activations.
  bool offload_optimizer = false;

  bool operator==(const ParallelSpec&) const = default;
};

/// One rank's share of `bytes` spread evenly over `ranks` (rounded up).
constexpr std::uint64_t shard(std::uint64_t bytes, std::uint64_t ranks) {
  return ranks <= 1 ? bytes : bytes / ranks + (bytes % ranks != 0);
}

/// Whether each model state is sharded at this stage.
struct Sharding {
  std::uint64_t ranks = 1;
  bool states = false;   ///< optimizer states, master weights, step temporaries (stage >= 1)
  bool grads = false;    ///< gradients and master gradients (stage >= 2)
  bool params = false;   ///< parameters (stage 3)
  bool offload = false;  ///< master weights, optimizer states and master grads on the host
};

/// The sharding a ParallelSpec implies.
constexpr Sharding sharding_of(const ParallelSpec& p) {
  return {p.data_parallel, p.zero_stage >= 1 && p.data_parallel > 1,
          p.zero_stage >= 2 && p.data_parallel > 1, p.zero_stage >= 3 && p.data_parallel > 1,
          p.offload_optimizer};
}

}  // namespace memest
