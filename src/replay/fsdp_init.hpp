// Private to the core: the device allocations of FSDP1's constructor building one flat
// parameter from a module that is not yet on the device (src/replay/fsdp_init.cpp).
#pragma once

#include "nf4_init.hpp"
#include "parallel/fsdp.hpp"

#include <vector>

namespace memest::detail {

/// Slot of fsdp1_unit_construction's sequence that holds the rank's shard, kept.
inline constexpr std::uint32_t kFsdpShard = 0;

/// The allocations and frees of FullyShardedDataParallel's constructor, with a device_id and
/// sync_module_states=True, on one unit whose parameters are on the host or the meta device
/// (docs/parallelism.md, "FSDP's constructor"). Every block but kFsdpShard is freed by the
/// end; the sequence uses slots below fsdp1_unit_slots(flat).
std::vector<AllocEvent> fsdp1_unit_construction(const FsdpFlatParam& flat);

/// The slots fsdp1_unit_construction(flat) uses.
std::size_t fsdp1_unit_slots(const FsdpFlatParam& flat);

}  // namespace memest::detail
