#include "testutil.hpp"

#include <memest/check.hpp>
#include <memest/hf_config.hpp>
#include <memest/report.hpp>
#include <memest/search.hpp>

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace memest;

namespace {

RunSpec llama(std::string_view policy) {
  RunSpec r;
  r.model = load_model_preset("llama-2-7b");
  r.precision = precision_preset(policy);
  r.optimizer.kind = OptimizerKind::adamw;
  r.training.micro_batch = 1;
  r.training.seq_len = 4096;
  return r;
}

std::uint64_t need_at(RunSpec r, FitTarget t, std::uint64_t v) {
  (t == FitTarget::micro_batch ? r.training.micro_batch : r.training.seq_len) = v;
  return bytes_needed(r);
}

}  // namespace

TEST_CASE("fit: the answer fits and one more does not", "[search]") {
  const auto run = llama("bf16");
  const Budget budget{find_gpu("h100-80gb").capacity, kDefaultReserve, "h100-80gb"};
  auto target = GENERATE(FitTarget::micro_batch, FitTarget::seq_len);
  const auto fit = fit_largest(run, budget, target, 1 << 16);
  REQUIRE(fit.best);
  REQUIRE(need_at(run, target, *fit.best) == fit.need_at_best);
  REQUIRE(fit.need_at_best <= budget.usable());
  if (*fit.best < fit.limit) {
    REQUIRE(need_at(run, target, *fit.best + 1) == fit.need_past_best);
    REQUIRE(fit.need_past_best > budget.usable());
  }
  REQUIRE(fit.evaluations < 64);  // doubling + bisection, not a scan
}

TEST_CASE("fit: when nothing fits, remedies are ranked and each is a real estimate", "[search]") {
  auto run = llama("fp32");
  run.training.seq_len = 1024;
  const Budget budget{find_gpu("a10").capacity, kDefaultReserve, "a10"};
  const auto fit = fit_largest(run, budget, FitTarget::micro_batch);
  REQUIRE_FALSE(fit.best);
  REQUIRE(fit.need_past_best > budget.usable());
  const auto fixes = remedies(run, budget);
  REQUIRE(fixes.size() >= 4);
  for (std::size_t i = 0; i < fixes.size(); ++i) {
    CAPTURE(fixes[i].change);
    REQUIRE(fixes[i].need == bytes_needed(fixes[i].run));
    REQUIRE(fixes[i].need < bytes_needed(run));
    REQUIRE(fixes[i].fits == (fixes[i].need <= budget.usable()));
    REQUIRE((fixes[i].changes == 1 || fixes[i].fits));  // combinations only when they fit
    if (i == 0) continue;
    const auto& a = fixes[i - 1];
    const auto& b = fixes[i];
    // What fits first; on the GPUs given before more GPUs, fewest changes first, then the
    // smallest need.
    REQUIRE((a.fits || !b.fits));
    if (a.fits && b.fits) REQUIRE((!a.more_gpus || b.more_gpus));
    const bool same_kind = a.fits == b.fits && a.more_gpus == b.more_gpus;
    if (a.fits && b.fits && same_kind) REQUIRE(a.changes <= b.changes);
    if (!a.fits && !b.fits) REQUIRE(a.need <= b.need);
    if (a.fits && same_kind && a.changes == b.changes) REQUIRE(a.need <= b.need);
  }
  // QLoRA of a 7B model fits a 24 GB card; fp32 full fine-tuning does not.
  REQUIRE(fixes.front().fits);
}

TEST_CASE("issue 12: fit tries remedies in combination and suggests more GPUs", "[search]") {
  auto run = llama("fp32");
  run.training.seq_len = 1024;
  const Budget budget{find_gpu("a10").capacity, kDefaultReserve, "a10"};
  const auto fixes = remedies(run, budget);
  bool combination = false, gpus = false, fused = false;
  for (const auto& f : fixes) {
    CAPTURE(f.change);
    combination = combination || (f.changes > 1 && f.fits);
    gpus = gpus || (f.run.parallel.data_parallel > 1 && f.run.parallel.zero_stage == 3);
    fused = fused || f.run.optimizer.impl == OptimizerImpl::fused;
    if (f.changes == 1 || !f.fits) continue;
    // A fitting combination is minimal: no single change of it fits on its own.
    for (const auto& g : fixes) {
      if (g.changes == 1 && g.fits) REQUIRE(f.change.find(g.change) == std::string::npos);
    }
  }
  REQUIRE(combination);
  REQUIRE(gpus);
  REQUIRE(fused);
}

TEST_CASE("issue 12: fit --for seq stops at a learned position table", "[search]") {
  RunSpec run;
  run.model = load_model_preset("gpt2");
  run.training.micro_batch = 1;
  run.training.seq_len = 1;
  const Budget budget{find_gpu("h100-80gb").capacity, kDefaultReserve, "h100-80gb"};
  const auto fit = fit_largest(run, budget, FitTarget::seq_len, 1 << 20);
  REQUIRE(fit.best);
  REQUIRE(*fit.best == 1024);  // GPT-2's n_positions, not the budget's limit
  REQUIRE(fit.limit_is_model);
}

TEST_CASE("sweep: every combination, each the estimate of its run", "[search]") {
  const auto run = llama("fp32");
  SweepGrid grid;
  grid.micro_batches = {1, 2};
  grid.seq_lens = {512, 1024, 2048};
  grid.policies = {precision_preset("fp32"), precision_preset("bf16")};
  grid.optimizers = {OptimizerKind::adamw, OptimizerKind::sgd};
  const Budget budget{80ULL << 30, 0, "budget"};
  const auto rows = sweep(run, grid, budget);
  REQUIRE(rows.size() == 2 * 3 * 2 * 2);
  for (const auto& row : rows) {
    RunSpec r = run;
    r.training.micro_batch = row.micro_batch;
    r.training.seq_len = row.seq_len;
    r.precision = precision_preset(row.precision);
    r.optimizer.kind = row.optimizer;
    REQUIRE(row.need == bytes_needed(r));
    REQUIRE(row.fits == (row.need <= budget.usable()));
  }
}

TEST_CASE("sweep: every sequence must split over the sequence- and context-parallel ranks",
          "[search]") {
  RunSpec run = llama("bf16");
  run.parallel.tensor = 2;
  run.parallel.sequence = true;
  run.training.seq_len = 4096;
  SweepGrid grid;
  grid.seq_lens = {4096, 8192, 4097};  // the last does not split over t = 2 ranks
  CHECK_THROWS_WITH(sweep(run, grid, std::nullopt),
                    "--sp: the sequence of 4097 tokens does not split over t x c = 2 ranks "
                    "(expected a multiple of 2)");
  grid.seq_lens = {4096, 8192};
  CHECK(sweep(run, grid, std::nullopt).size() == 2);
  // Through the command line: the usual one-line error, exit code 2, no rows.
  const test::CliResult r = test::run_cli({"sweep", "--model", "llama-2-7b", "--tp", "2", "--sp",
                                           "--batches", "1", "--seqs", "4096,4097"});
  CHECK(r.code == 2);
  CHECK(r.out.empty());
  CHECK(r.err ==
        "memest: error: --sp: the sequence of 4097 tokens does not split over t x c = 2 ranks "
        "(expected a multiple of 2)\n");
}

namespace {

// Llama-3.2-1B at micro-batch 1, sequence 2048, mixed-bf16 AdamW: 1.2B parameters at 16 B each
// (~20 GB of model states), too much for one 16 GB T4.
RunSpec llama_1b_run() {
  RunSpec run;
  run.model = load_model_preset("llama-3.2-1b");
  run.precision = precision_preset("mixed-bf16");
  run.optimizer.kind = OptimizerKind::adamw;
  run.training.micro_batch = 1;
  run.training.seq_len = 2048;
  return run;
}

}  // namespace

TEST_CASE("fit --gpus: each layout that fits is estimated like any run, most headroom first",
          "[search]") {
  const RunSpec run = llama_1b_run();
  const Budget budget{find_gpu("t4").capacity, kDefaultReserve, "t4", true};
  const LayoutSearch s = fit_layouts(run, budget, 4, 64);
  CHECK(s.gpus == 4);
  REQUIRE_FALSE(s.fits.empty());
  CHECK(s.fits.size() < s.tried);  // ZeRO-0 without splits holds everything on every device
  for (std::size_t i = 0; i < s.fits.size(); ++i) {
    const LayoutFit& f = s.fits[i];
    const ParallelSpec& p = f.parallel;
    CAPTURE(p.tensor, p.pipeline, p.context, p.data_parallel, p.zero_stage);
    CHECK(p.tensor * p.pipeline * p.context * p.data_parallel == 4);
    RunSpec at = run;
    at.parallel = p;
    at.training.recompute = f.recompute;
    CHECK(f.need == bytes_needed(at));
    CHECK(f.headroom == budget.usable() - f.need);
    CHECK(f.largest >= 1);
    at.training.micro_batch = f.largest;
    CHECK(bytes_needed(at) <= budget.usable());
    if (i > 0) CHECK(s.fits[i - 1].headroom >= f.headroom);
  }
}

TEST_CASE("fit --gpus tells its progress once per candidate, ending at the total", "[search]") {
  const RunSpec run = llama_1b_run();
  const Budget budget{find_gpu("t4").capacity, kDefaultReserve, "t4", true};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  const auto record = [&](std::uint64_t done, std::uint64_t total) {
    calls.emplace_back(done, total);
  };
  const LayoutSearch s = fit_layouts(run, budget, 4, 64, FitTarget::micro_batch, {}, record);
  REQUIRE(calls.size() > 2);
  const std::uint64_t total = calls.front().second;
  // One call before each candidate (a layout with one recompute choice), then (total, total).
  CHECK(calls.size() == total + 1);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i] == std::make_pair(static_cast<std::uint64_t>(i), total));
  }
  // Every layout estimated was a candidate; some candidates are refused by check_layout.
  CHECK(s.tried <= total);
  // With the recompute fixed, a third as many candidates.
  LayoutConstraints fixed;
  fixed.recompute = Recompute::full;
  calls.clear();
  (void)fit_layouts(run, budget, 4, 64, FitTarget::micro_batch, fixed, record);
  REQUIRE_FALSE(calls.empty());
  CHECK(calls.back().second * 3 == total);
}

TEST_CASE("fit of a split run asks the caller's NeedCache", "[search]") {
  auto run = llama("bf16");
  run.parallel.tensor = 2;
  run.parallel.pipeline = 2;
  run.parallel.microbatches = 4;
  const Budget budget{find_gpu("a100-40gb").capacity, kDefaultReserve, "a100-40gb"};
  const FitResult fresh = fit_largest(run, budget, FitTarget::micro_batch, 256);
  REQUIRE(fresh.best);
  NeedCache need;
  const std::uint64_t at_run = need(run);  // fit_layouts asks first at the layout's own batch
  const FitResult shared = fit_largest(run, budget, FitTarget::micro_batch, 256, need);
  CHECK(shared.best == fresh.best);
  CHECK(shared.need_at_best == fresh.need_at_best);
  CHECK(shared.need_past_best == fresh.need_past_best);
  CHECK(shared.evaluations == fresh.evaluations);
  CHECK(at_run == bytes_needed(run));
}

namespace {

// A Llama model on 8 H100s under a stack: the layouts of fit --gpus that fit.
LayoutSearch search_llama_on_8(std::string_view stack, std::string_view model = "llama-2-7b") {
  RunSpec run;
  run.model = load_model_preset(model);
  run.precision = precision_preset("mixed-bf16");
  run.optimizer.kind = OptimizerKind::adamw;
  run.training.micro_batch = 1;
  run.training.seq_len = 4096;
  run.training.stack = std::string(stack);
  const Budget budget{find_gpu("h100-80gb").capacity, kDefaultReserve, "h100-80gb"};
  return fit_layouts(run, budget, 8, 4);
}

// The layout with everything of `p` but sequence parallelism flipped, among the fits.
const LayoutFit* search_twin_without_sp(const LayoutSearch& s, const LayoutFit& f) {
  for (const LayoutFit& g : s.fits) {
    ParallelSpec q = g.parallel;
    q.sequence = !q.sequence;
    if (q == f.parallel && g.recompute == f.recompute) return &g;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("fit --gpus tries sequence parallelism with TP and interleaving with PP", "[search]") {
  const LayoutSearch s = search_llama_on_8("");
  REQUIRE_FALSE(s.fits.empty());
  bool sp_on = false, sp_off = false, interleaved = false, one_f_one_b = false;
  std::size_t compared = 0;
  for (const LayoutFit& f : s.fits) {
    const ParallelSpec& p = f.parallel;
    CAPTURE(p.tensor, p.sequence, p.pipeline, p.virtual_stages, p.data_parallel, p.zero_stage);
    CHECK((!p.sequence || p.tensor > 1));
    if (p.tensor > 1) (p.sequence ? sp_on : sp_off) = true;
    CHECK((p.pipeline > 1 || p.virtual_stages == 1));
    if (p.pipeline > 1) (p.virtual_stages == 2 ? interleaved : one_f_one_b) = true;
    // Two chunks per rank: interleaved 1F1B, or one of torch.distributed.pipelining's
    // multi-chunk schedules (no stack given); one chunk: 1F1B (GPipe is never tried).
    if (p.virtual_stages > 1) CHECK(p.schedule() != PipeSchedule::gpipe);
    if (p.virtual_stages > 1) CHECK(p.schedule() != PipeSchedule::one_f_one_b);
    if (p.pipeline > 1 && p.virtual_stages == 1) CHECK(p.schedule() == PipeSchedule::one_f_one_b);
    if (p.virtual_stages > 1) CHECK(32 % (p.pipeline * p.virtual_stages) == 0);
    // Sequence parallelism splits the norms' and dropouts' activations over the TP ranks: never
    // more, and less where the activations make the peak.
    if (!p.sequence) continue;
    if (const LayoutFit* twin = search_twin_without_sp(s, f)) {
      CHECK(f.need <= twin->need);
      if (f.need < twin->need) ++compared;
    }
  }
  CHECK(sp_on);
  CHECK(sp_off);
  CHECK(interleaved);
  CHECK(one_f_one_b);
  CHECK(compared > 0);
}

TEST_CASE("fit --gpus: a stack narrows the layouts to what it runs", "[search]") {
  // Megatron-LM: the distributed optimizer (ZeRO <= 1), sequence parallelism with every TP.
  const LayoutSearch megatron = search_llama_on_8("megatron");
  REQUIRE_FALSE(megatron.fits.empty());
  for (const LayoutFit& f : megatron.fits) {
    CHECK(f.parallel.zero_stage <= 1);
    CHECK(f.parallel.sequence == (f.parallel.tensor > 1));
  }
  // torchtitan: FSDP2 with TP, PP and CP (not resharded after forward under PP), DDP only
  // on a pure data-parallel mesh, never ZeRO-1; SP with every TP.
  const LayoutSearch titan = search_llama_on_8("torchtitan");
  REQUIRE_FALSE(titan.fits.empty());
  std::set<unsigned> pure_dp;
  for (const LayoutFit& f : titan.fits) {
    const ParallelSpec& p = f.parallel;
    CAPTURE(p.tensor, p.pipeline, p.context, p.data_parallel, p.zero_stage);
    CHECK(p.sequence == (p.tensor > 1));
    CHECK(p.zero_stage != 1);
    CHECK(p.fsdp_version == (p.zero_stage > 0 ? 2U : 0U));
    const bool sharded = p.data_parallel > 1 && (p.tensor > 1 || p.pipeline > 1 || p.context > 1);
    if (sharded) CHECK(p.zero_stage == (p.pipeline > 1 ? 2U : 3U));
    if (p.data_parallel == 8) pure_dp.insert(p.zero_stage);
  }
  CHECK(pure_dp == std::set<unsigned>{3});  // 7B under DDP holds 16 bytes a parameter: too much
  // A 1B model fits under DDP too; DDP only where data parallelism is all there is.
  std::set<unsigned> small_pure_dp;
  for (const LayoutFit& f : search_llama_on_8("torchtitan", "llama-3.2-1b").fits) {
    const ParallelSpec& p = f.parallel;
    if (p.data_parallel == 8) small_pure_dp.insert(p.zero_stage);
    if (p.data_parallel > 1 && p.zero_stage == 0) CHECK(p.data_parallel == 8);
  }
  CHECK(small_pure_dp == std::set<unsigned>{0, 3});
}

TEST_CASE("fit --gpus table: tp shows +sp, a schedule column only where a layout has PP",
          "[search]") {
  RunSpec run;
  run.model = load_model_preset("llama-2-7b");
  run.precision = precision_preset("mixed-bf16");
  run.optimizer.kind = OptimizerKind::adamw;
  run.training.micro_batch = 1;
  run.training.seq_len = 4096;
  const Budget budget{find_gpu("h100-80gb").capacity, kDefaultReserve, "h100-80gb"};
  const LayoutSearch eight = fit_layouts(run, budget, 8, 4);
  const std::string table = render_layouts_table(run, budget, eight, Unit::GB, 1000);
  // The schedule column is as wide as its widest name, interleaved-zero-bubble/v2.
  CHECK_THAT(table, Catch::Contains("    2+sp   2  interleaved-1f1b/v2        "));
  CHECK_THAT(table, Catch::Contains("       2   4  1f1b                       "));
  CHECK_THAT(table, Catch::Contains("    2+sp   2  interleaved-zero-bubble/v2 "));
  CHECK_THAT(table, Catch::Contains("      tp  pp  schedule                    cp   dp  shard"));
  // One device (a 1B model, to fit): no sequence parallelism, no pipeline, the columns of before.
  run.model = load_model_preset("llama-3.2-1b");
  const LayoutSearch one = fit_layouts(run, budget, 1, 4);
  REQUIRE_FALSE(one.fits.empty());
  const std::string alone = render_layouts_table(run, budget, one, Unit::GB, 1000);
  CHECK_THAT(alone, Catch::Contains("\n   tp  pp  cp   dp  shard"));
  CHECK_THAT(alone, !Catch::Contains("schedule"));
}
