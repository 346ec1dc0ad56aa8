// Throughput of the core and latency of a whole CLI run, in-process.
//   cmake --workflow --preset release && ./build/release/bench/memest_bench
#include "cli/cli.hpp"

#include <memest/check.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>
#include <memest/peak.hpp>
#include <memest/search.hpp>

#include <benchmark/benchmark.h>

#include <sstream>
#include <vector>

namespace {

memest::RunSpec llama_run() {
  memest::RunSpec run;
  run.model = memest::load_model_preset("llama-2-7b");
  run.precision = memest::precision_preset("mixed-bf16");
  run.optimizer.kind = memest::OptimizerKind::adamw;
  run.training.micro_batch = 1;
  run.training.seq_len = 4096;
  return run;
}

// The full estimate with its report strings, as one CLI run computes it.
void BM_EstimateLlama7B(benchmark::State& state) {
  const auto run = llama_run();
  for (auto _ : state) {
    auto e = memest::estimate(run);
    benchmark::DoNotOptimize(e.total_bytes);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EstimateLlama7B);

// What searches and sweeps evaluate: the bytes a configuration needs, from the plans a
// NeedCache keeps for one run.
void BM_BytesNeededLlama7B(benchmark::State& state) {
  auto run = llama_run();
  memest::NeedCache need;
  std::uint64_t b = 1;
  for (auto _ : state) {
    run.training.micro_batch = b;
    b = b % 64 + 1;
    benchmark::DoNotOptimize(need(run));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_BytesNeededLlama7B);

// A search's inner loop: one plan, many sizes.
void BM_PeakPlanLlama7B(benchmark::State& state) {
  const auto run = llama_run();
  const memest::PeakPlan plan(run, *memest::activation_inputs(run, memest::Notes::skipped));
  std::uint64_t b = 1;
  for (auto _ : state) {
    b = b % 64 + 1;
    benchmark::DoNotOptimize(plan.needed(b, 4096));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PeakPlanLlama7B);

// --allocator cuda: every needed() replays the caching allocator over model loading and two
// steps of an 80-layer model (docs/performance.md).
void BM_AllocatorReplayLlama70B(benchmark::State& state) {
  auto run = llama_run();
  run.model = memest::load_model_preset("llama-2-70b");
  run.training.allocator = memest::Allocator::cuda;
  const memest::PeakPlan plan(run, *memest::activation_inputs(run, memest::Notes::skipped));
  std::uint64_t b = 1;
  for (auto _ : state) {
    b = b % 8 + 1;
    benchmark::DoNotOptimize(plan.needed(b, 4096));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AllocatorReplayLlama70B)->Unit(benchmark::kMicrosecond);

// A sweep of 8 x 8 x 4 x 4 = 1024 configurations per iteration.
void BM_Sweep1024(benchmark::State& state) {
  const auto run = llama_run();
  memest::SweepGrid grid;
  grid.micro_batches = {1, 2, 4, 8, 16, 32, 64, 128};
  grid.seq_lens = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  for (auto p : {"fp32", "amp-bf16", "mixed-bf16", "bf16"}) {
    grid.policies.push_back(memest::precision_preset(p));
  }
  grid.optimizers = {memest::OptimizerKind::adamw, memest::OptimizerKind::sgd,
                     memest::OptimizerKind::adam8bit, memest::OptimizerKind::lion};
  for (auto _ : state) {
    auto rows = memest::sweep(run, grid, std::nullopt);
    benchmark::DoNotOptimize(rows.data());
  }
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(BM_Sweep1024)->Unit(benchmark::kMillisecond);

// A whole one-shot CLI run with a preset model, in-process (no process start-up).
void BM_CliOneShot(benchmark::State& state) {
  std::vector<const char*> argv = {"memest", "--model", "llama-2-7b", "--batch",  "1",
                                   "--seq",  "4096",    "--amp",      "--format", "json"};
  for (auto _ : state) {
    std::ostringstream out, err;
    int code = memest::cli::run(static_cast<int>(argv.size()), argv.data(), out, err);
    benchmark::DoNotOptimize(code);
  }
}
BENCHMARK(BM_CliOneShot)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
