#pragma once

#include <memest/units.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// An accelerator preset: the memory one device offers.
struct Gpu {
  std::string_view name;   ///< "h100-80gb"
  std::string_view label;  ///< "NVIDIA H100 80GB (SXM/PCIe)"
  std::uint64_t
      capacity;  ///< bytes the driver reports (NVML total) or, where not known, the datasheet size
  std::string_view source;  ///< "nvml" (as nvidia-smi reports) or "datasheet"
  std::uint32_t sm = 0;     ///< CUDA compute capability x 10 (90: Hopper); 0 for other vendors
  /// Streaming multiprocessors (AMD: compute units), as torch's multi_processor_count reports
  /// them; 0 where not known.
  std::uint32_t sms = 0;
};

/// A stated CUDA context size: what a process holds on the device outside PyTorch's allocator
/// once CUDA is initialised (driver, kernels of the loaded libraries), as measured.
struct CudaContext {
  std::string_view name;  ///< "v100-cuda11.2"
  std::uint64_t bytes;
  std::string_view source;  ///< where it was measured
};

/// The stated contexts --context-reserve accepts by name.
const std::vector<CudaContext>& cuda_context_presets();

/// The context of this name, or nullptr.
const CudaContext* find_cuda_context(std::string_view name);

/// All GPU presets, in display order.
const std::vector<Gpu>& gpu_presets();

/// The preset of this name; throws Error with a did-you-mean suggestion and the list.
const Gpu& find_gpu(std::string_view name);

/// Memory kept back by default from a device's capacity for the CUDA context, cuBLAS/cuDNN
/// workspaces and allocator slack that no tensor accounts for: 1 GiB (docs/method.md).
inline constexpr std::uint64_t kDefaultReserve = 1ULL << 30;

/// The memory a run may use on one device.
struct Budget {
  std::uint64_t capacity = 0;  ///< the device's memory, or the --budget given
  std::uint64_t reserve = 0;   ///< kept back (context, workspaces)
  std::string source;          ///< "h100-80gb", or "budget 80GiB" as given
  bool preset = false;         ///< a GPU preset (source is its name)
  /// capacity - reserve (0 if the reserve is larger).
  std::uint64_t usable() const { return capacity > reserve ? capacity - reserve : 0; }
};

/// The budget for a line of text in one unit: the GPU's name, or "budget 85.90 GB" for a
/// --budget given as 80GiB (so a line never mixes GB and GiB).
std::string budget_label(const Budget& budget, Unit unit);

/// Whether `need` bytes fit a budget, and by how much.
struct BudgetCheck {
  bool fits = false;
  std::uint64_t need = 0;
  std::uint64_t usable = 0;
  std::uint64_t headroom = 0;  ///< usable - need when it fits
  std::uint64_t over = 0;      ///< need - usable when it does not
};

/// Compares `need` with the budget's usable bytes.
BudgetCheck check_budget(std::uint64_t need, const Budget& budget);

}  // namespace memest
