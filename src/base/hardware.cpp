#include <memest/error.hpp>
#include <memest/hardware.hpp>
#include <memest/suggest.hpp>

#include <fmt/format.h>

namespace memest {
namespace {

constexpr std::uint64_t MiB = 1ULL << 20;
constexpr std::uint64_t GiB = 1ULL << 30;
constexpr std::uint64_t GB = 1'000'000'000ULL;

}  // namespace

const std::vector<Gpu>& gpu_presets() {
  // NVML totals (what nvidia-smi and torch.cuda report) as published in Modal's "Why does an
  // NVIDIA H100 80GB card offer 85.52 GB?" table; the others are datasheet sizes, where a
  // vendor's "GB" of HBM is GiB for NVIDIA and AMD parts and GB for Intel Gaudi. The last
  // column is the multiprocessor count of the vendor's datasheets and architecture whitepapers
  // (AMD: compute units, one GCD of the MI250X); "h100-80gb" takes the SXM part's 132 (the
  // PCIe card has 114) and "a10" the A10's 72 (the A10G has 80).
  static const std::vector<Gpu> gpus = {
      {"t4", "NVIDIA T4 16GB", 15'360 * MiB, "nvml", 75, 40},
      {"v100-16gb", "NVIDIA V100 16GB", 16 * GiB, "datasheet", 70, 80},
      {"v100-32gb", "NVIDIA V100 32GB", 32 * GiB, "datasheet", 70, 80},
      {"a10", "NVIDIA A10/A10G 24GB", 23'028 * MiB, "nvml", 86, 72},
      {"l4", "NVIDIA L4 24GB", 23'034 * MiB, "nvml", 89, 58},
      {"rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 24 * GiB, "datasheet", 86, 82},
      {"rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 24 * GiB, "datasheet", 89, 128},
      {"a100-40gb", "NVIDIA A100 40GB", 40'960 * MiB, "nvml", 80, 108},
      {"l40s", "NVIDIA L40S 48GB", 46'068 * MiB, "nvml", 89, 142},
      {"a100-80gb", "NVIDIA A100 80GB", 81'920 * MiB, "nvml", 80, 108},
      {"h100-80gb", "NVIDIA H100 80GB (SXM/PCIe)", 81'559 * MiB, "nvml", 90, 132},
      {"h100-nvl-94gb", "NVIDIA H100 NVL 94GB", 94 * GiB, "datasheet", 90, 132},
      {"h200-141gb", "NVIDIA H200 141GB", 143'771 * MiB, "nvml", 90, 132},
      {"b200-192gb", "NVIDIA B200 192GB", 192 * GiB, "datasheet", 100, 148},
      {"mi250x", "AMD Instinct MI250X, one GCD (64 GB of the card's 128 GB)", 64 * GiB, "datasheet",
       0, 110},
      {"mi300x", "AMD Instinct MI300X 192GB", 192 * GiB, "datasheet", 0, 304},
      {"gaudi2", "Intel Gaudi 2 96GB", 96 * GB, "datasheet"},
      {"gaudi3", "Intel Gaudi 3 128GB", 128 * GB, "datasheet"},
  };
  return gpus;
}

const std::vector<CudaContext>& cuda_context_presets() {
  static const std::vector<CudaContext> contexts = {
      {"v100-cuda11.2", 1343 * MiB,
       "Hugging Face, perf_train_gpu_one (transformers docs, 2022): nvidia-smi 'GPU memory "
       "occupied: 1343 MB' (MiB) after torch.ones((1, 1)).to('cuda') on a Tesla V100-SXM2 16GB, "
       "driver 460.91.03, CUDA 11.2"},
  };
  return contexts;
}

const CudaContext* find_cuda_context(std::string_view name) {
  for (const auto& c : cuda_context_presets()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const Gpu& find_gpu(std::string_view name) {
  std::vector<std::string_view> names;
  for (const auto& g : gpu_presets()) {
    if (g.name == name) return g;
    names.push_back(g.name);
  }
  std::string hint = did_you_mean(name, names);
  throw Error(fmt::format("unknown GPU \"{}\"{} (expected one of: {})", name, hint,
                          fmt::join(names, ", ")));
}

std::string budget_label(const Budget& budget, Unit unit) {
  return budget.preset ? budget.source
                       : fmt::format("budget {}", format_bytes(budget.capacity, unit));
}

BudgetCheck check_budget(std::uint64_t need, const Budget& budget) {
  BudgetCheck c;
  c.need = need;
  c.usable = budget.usable();
  c.fits = need <= c.usable;
  if (c.fits) {
    c.headroom = c.usable - need;
  } else {
    c.over = need - c.usable;
  }
  return c;
}

}  // namespace memest
