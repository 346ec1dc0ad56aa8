// Private to the core: the device allocations of quantising one QLoRA base weight to NF4 as
// the model is built (src/nf4_init.cpp).
#pragma once

#include <memest/run_spec.hpp>

#include <cstdint>
#include <vector>

namespace memest::detail {

/// One event of an allocation sequence: `bytes` allocated into `slot`, or (bytes 0) the block
/// in `slot` freed.
struct AllocEvent {
  std::uint32_t slot = 0;
  std::uint64_t bytes = 0;
};

/// Slot 0 of nf4_quantisation's sequence: the packed NF4 data, kept by the weight.
inline constexpr std::uint32_t kNf4Data = 0;
/// The slot of nf4_dequantisation's result: the weight back in bf16, kept.
inline constexpr std::uint32_t kNf4Original = 1;
/// More than the number of slots a sequence uses.
inline constexpr std::uint32_t kNf4Slots = 24;

/// The allocations and frees of torchao's NF4Tensor.from_tensor on a 16-bit weight of `n`
/// elements that is already on the device (docs/techniques.md, "QLoRA quantised on the
/// device"). Every block but kNf4Data is freed by the end. `how` is whole or chunked.
std::vector<AllocEvent> nf4_quantisation(std::uint64_t n, QloraInit how);

/// The allocations and frees of torchao's NF4Tensor.get_original_weight on a weight of `n`
/// elements: every block but kNf4Original (the bf16 weight) is freed by the end.
std::vector<AllocEvent> nf4_dequantisation(std::uint64_t n);

}  // namespace memest::detail
