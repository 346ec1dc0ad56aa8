// Throughput of the core and latency of a whole CLI run, in-process.
//   cmake --workflow --preset release && ./build/release/bench/memest_bench
#include "cli/cli.hpp"

#include <memest/estimate.hpp>

#include <benchmark/benchmark.h>

#include <sstream>
#include <vector>

namespace {

void BM_EstimateBareCount(benchmark::State& state) {
  memest::RunSpec run;
  run.model = memest::model_from_count(7'000'000'000);
  run.precision = memest::precision_preset("mixed-bf16");
  run.optimizer.kind = memest::OptimizerKind::adamw;
  for (auto _ : state) {
    auto e = memest::estimate(run);
    benchmark::DoNotOptimize(e.total_bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EstimateBareCount);

void BM_CliOneShot(benchmark::State& state) {
  std::vector<const char*> argv = {"memest", "--params", "7B",       "--optimizer",
                                   "adamw",  "--amp",    "--format", "json"};
  for (auto _ : state) {
    std::ostringstream out, err;
    int code = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
    benchmark::DoNotOptimize(code);
  }
}
BENCHMARK(BM_CliOneShot)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
