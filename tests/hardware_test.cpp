#include <memest/error.hpp>
#include <memest/hardware.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string_view>

using namespace memest;

TEST_CASE("GPU presets: unique names, NVML totals where measured", "[hardware]") {
  std::set<std::string_view> names;
  for (const Gpu& g : gpu_presets()) {
    CAPTURE(g.name);
    CHECK(names.insert(g.name).second);
    CHECK((g.source == "nvml" || g.source == "datasheet"));
  }
  // nvidia-smi on an H100 80GB reports 81,559 MiB (85.52 GB), not 80 GiB.
  CHECK(find_gpu("h100-80gb").capacity == 81'559ULL << 20);
  CHECK(find_gpu("gaudi2").capacity == 96'000'000'000ULL);  // Intel's GB are 10^9 bytes
  CHECK_THROWS_WITH(find_gpu("h100"),
                    Catch::StartsWith("unknown GPU \"h100\" (did you mean \"h100-80gb\"?) "
                                      "(expected one of: t4, v100-16gb,"));
}

TEST_CASE("a budget is the capacity less its reserve", "[hardware]") {
  const Budget b{80ULL << 30, kDefaultReserve, "budget 80GiB", false};
  CHECK(b.usable() == 79ULL << 30);
  CHECK(Budget{1 << 20, 2 << 20, "tiny", false}.usable() == 0);  // a reserve past the capacity

  const BudgetCheck fits = check_budget(70ULL << 30, b);
  CHECK(fits.fits);
  CHECK(fits.headroom == 9ULL << 30);
  CHECK(fits.over == 0);
  const BudgetCheck over = check_budget(80ULL << 30, b);
  CHECK_FALSE(over.fits);
  CHECK(over.over == 1ULL << 30);
  CHECK(over.headroom == 0);

  // A --budget line is in the report's unit; a preset by its name.
  CHECK(budget_label(b, Unit::GB) == "budget 85.90 GB");
  CHECK(budget_label(Budget{find_gpu("t4").capacity, 0, "t4", true}, Unit::GB) == "t4");
}

TEST_CASE("stated CUDA contexts are found by name", "[hardware]") {
  const CudaContext* v100 = find_cuda_context("v100-cuda11.2");
  REQUIRE(v100 != nullptr);
  CHECK(v100->bytes == 1343ULL << 20);  // "1343 MB" as nvidia-smi prints MiB
  CHECK(find_cuda_context("a100") == nullptr);
}
