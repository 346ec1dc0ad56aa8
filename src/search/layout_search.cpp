// `fit --gpus`: the layouts of a number of GPUs that fit a budget (docs/parallelism.md). Each
// layout is estimated per device and per stage like any run; nothing about speed is modelled.
#include "parallel/layout.hpp"
#include "parallel/schedule.hpp"

#include <memest/check.hpp>
#include <memest/error.hpp>
#include <memest/search.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace memest {
namespace {

std::vector<u64> divisors_up_to(u64 n, u64 most, const std::optional<u64>& fixed) {
  if (fixed) return n % *fixed == 0 ? std::vector<u64>{*fixed} : std::vector<u64>{};
  std::vector<u64> out;
  for (u64 d = 1; d <= n && d <= most; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

bool power_of_two(u64 n) { return (n & (n - 1)) == 0; }

// What the user fixed must make `gpus` devices: each size divides them, and their product too
// (all four given: equals them).
void check_fixed(const LayoutConstraints& fixed, u64 gpus) {
  const std::pair<const char*, std::optional<u64>> sizes[] = {{"--tp", fixed.tensor},
                                                              {"--pp", fixed.pipeline},
                                                              {"--cp", fixed.context},
                                                              {"--dp", fixed.data_parallel}};
  u64 product = 1;
  std::string flags;
  int count = 0;
  for (const auto& [flag, size] : sizes) {
    if (!size) continue;
    product *= *size;
    flags += fmt::format("{}{} {}", flags.empty() ? "" : " x ", flag, *size);
    ++count;
    if (product > gpus || gpus % product != 0 || (count == 4 && product != gpus)) {
      throw Error(
          fmt::format("{}: {} cannot make the {} GPUs of --gpus (the sizes multiply to "
                      "the GPU count)",
                      flag, flags, gpus));
    }
  }
}

// What each stack runs, which narrows the search to it:
// - Megatron-LM @ d98e8a64: its distributed optimizer is ZeRO-1 (no ZeRO-2 or -3), and its
//   tensor parallelism runs with sequence parallelism (--sequence-parallel).
// - torchtitan torchtitan/models/llama3/infra/parallelize.py @ 81c1243395b4: parallelize_llama
//   applies FSDP2 (apply_fsdp: fully_shard per block, reshard_after_forward=False when pipeline
//   parallelism is on, so ZeRO-2-like there and ZeRO-3-like without) whenever the data-parallel
//   ranks shard, DDP (apply_ddp, plain replication) only on a 1-D mesh, and no ZeRO-1; its
//   tensor parallelism (apply_tp) runs the norms as SequenceParallel, so SP whenever TP > 1.
// Any other stack: ZeRO 0-3, and sequence parallelism on and off.
// Pipelines: Megatron-LM's 1F1B and interleaved 1F1B under --stack megatron, also
// torch.distributed.pipelining's schedules elsewhere (schedule_choices).
bool stack_is(const RunSpec& run, std::string_view name) { return run.training.stack == name; }

struct LayoutShape {
  u64 tp, pp, cp, dp;
};

// The sharding stages of a shape: torchtitan's one (DDP as well on a pure data-parallel mesh),
// else 0 to the highest the stack runs.
std::vector<unsigned> zero_stages(const RunSpec& run, const LayoutShape& s) {
  if (s.dp <= 1) return {0};
  if (stack_is(run, "torchtitan")) {
    const unsigned fsdp = s.pp > 1 ? 2U : 3U;
    if (s.tp == 1 && s.pp == 1 && s.cp == 1) return {0, fsdp};
    return {fsdp};
  }
  const unsigned highest = stack_is(run, "megatron") ? 1U : 3U;
  std::vector<unsigned> out;
  for (unsigned z = 0; z <= highest; ++z) out.push_back(z);
  return out;
}

// Sequence parallelism over the tensor-parallel ranks: on and off, on only where --sp was given
// or the stack runs it with TP.
std::vector<bool> sequence_choices(const RunSpec& run, u64 tp) {
  if (tp <= 1) return {false};
  if (run.parallel.sequence || stack_is(run, "megatron") || stack_is(run, "torchtitan"))
    return {true};
  return {false, true};
}

// A pipeline's schedule and its model chunks per rank.
struct ScheduleChoice {
  std::optional<PipeSchedule> schedule;  // unset: 1F1B, or interleaved 1F1B with chunks
  u64 chunks = 1;
};

// The schedules a pipeline of the layout may run, with two model chunks per rank where a
// schedule runs several (check_layout refuses the layers or micro-batches they do not take):
// what --pp-schedule / --vpp gave; Megatron-LM's 1F1B and interleaved 1F1B; for torchtitan and
// any other stack also torch.distributed.pipelining's looped BFS, interleaved zero bubble, ZB-V
// and DualPipeV (torchtitan's --parallelism.pipeline_parallel_schedule). GPipe is left out: it
// keeps every micro-batch in flight, never less than 1F1B on the same chunks.
std::vector<ScheduleChoice> schedule_choices(const RunSpec& run, u64 pp) {
  if (pp <= 1) return {{std::nullopt, 1}};
  if (run.parallel.pp_schedule || run.parallel.virtual_stages > 1)
    return {{run.parallel.pp_schedule, run.parallel.virtual_stages}};
  if (stack_is(run, "megatron")) return {{std::nullopt, 1}, {std::nullopt, 2}};
  return {{std::nullopt, 1},
          {std::nullopt, 2},
          {PipeSchedule::looped_bfs, 2},
          {PipeSchedule::interleaved_zero_bubble, 2},
          {PipeSchedule::zbv_zero_bubble, 2},
          {PipeSchedule::dualpipev, 2}};
}

// The expert-parallel sizes of a layout: 1, and for a model with routed experts each power of two
// that divides the data-parallel ranks and the experts (expert parallelism runs inside them);
// --ep given keeps its value.
std::vector<u64> expert_sizes(const RunSpec& run, u64 dp) {
  if (run.parallel.expert > 1) return {run.parallel.expert};
  const u64 experts = run.model.arch ? run.model.arch->num_experts : 0;
  std::vector<u64> out = {1};
  for (u64 e = 2; experts > 0 && e <= dp && e <= experts; e *= 2)
    if (dp % e == 0 && experts % e == 0) out.push_back(e);
  return out;
}

// The device counts of tensor, pipeline, context and data parallelism that make `gpus`.
std::vector<LayoutShape> candidate_shapes(const RunSpec& run, u64 gpus,
                                          const LayoutConstraints& fixed) {
  constexpr u64 kNode = 8;  // tensor and context parallelism stay inside a node
  std::vector<LayoutShape> out;
  for (u64 tp : divisors_up_to(gpus, kNode, fixed.tensor)) {
    if (!power_of_two(tp) && !fixed.tensor) continue;
    for (u64 pp : divisors_up_to(gpus / tp, gpus, fixed.pipeline)) {
      for (u64 cp : divisors_up_to(gpus / tp / pp, kNode, fixed.context)) {
        if (!power_of_two(cp) && !fixed.context) continue;
        if (cp > 1 && run.training.attention == Attention::eager) continue;
        const u64 dp = gpus / tp / pp / cp;
        if (fixed.data_parallel && dp != *fixed.data_parallel) continue;
        out.push_back({tp, pp, cp, dp});
      }
    }
  }
  return out;
}

// The parallel specs of `gpus` devices the model can take (check_layout accepts them).
std::vector<ParallelSpec> candidate_layouts(const RunSpec& run, u64 gpus,
                                            const LayoutConstraints& fixed) {
  std::vector<ParallelSpec> out;
  for (const LayoutShape& s : candidate_shapes(run, gpus, fixed)) {
    for (unsigned zero : zero_stages(run, s)) {
      if (fixed.zero_stage && s.dp > 1 && zero != *fixed.zero_stage) continue;
      for (u64 ep : expert_sizes(run, s.dp))
        for (bool sp : sequence_choices(run, s.tp))
          for (const ScheduleChoice& sc : schedule_choices(run, s.pp)) {
            ParallelSpec p = run.parallel;
            p.tensor = s.tp;
            p.sequence = sp;
            p.pipeline = s.pp;
            p.virtual_stages = sc.chunks;
            p.pp_schedule = sc.schedule;
            // m = max(grad_accum, p), and at least what the schedule runs (DualPipeV's 2p).
            const u64 least = std::max(s.pp, least_microbatches(p.schedule(), s.pp));
            p.microbatches = s.pp > 1 ? std::max(run.training.grad_accum, least) : 0;
            p.context = s.cp;
            p.data_parallel = s.dp;
            p.zero_stage = zero;
            if (stack_is(run, "torchtitan")) p.fsdp_version = zero > 0 ? 2 : 0;
            p.expert = ep;
            out.push_back(p);
          }
    }
  }
  return out;
}

// The layout (one check_layout accepts) at the run's micro-batch and sequence, and the largest
// value of the target it allows; nothing when it does not fit.
std::optional<LayoutFit> try_layout(const RunSpec& run, const Budget& budget, FitTarget target,
                                    u64 max, NeedCache& need_of) {
  try {
    const u64 need = need_of(run);
    if (need > budget.usable()) return std::nullopt;
    LayoutFit f{run.parallel, run.training.recompute, need, budget.usable() - need, 0};
    const FitResult best = fit_largest(run, budget, target, max, need_of);
    f.largest = best.best.value_or(0);
    return f;
  } catch (const Error&) {
    return std::nullopt;  // a size past 2^64
  }
}

}  // namespace

LayoutSearch fit_layouts(const RunSpec& run, const Budget& budget, u64 gpus, u64 max,
                         FitTarget target, const LayoutConstraints& fixed,
                         const LayoutProgress& progress) {
  check_fixed(fixed, gpus);
  LayoutSearch r;
  r.gpus = gpus;
  r.target = target;
  r.fixed = fixed;
  RunSpec point = run;
  if (point.training.micro_batch == 0) point.training.micro_batch = 1;
  if (point.training.seq_len == 0)
    point.training.seq_len = target == FitTarget::seq_len ? 1 : kFitDefaultSeq;
  const auto& arch = run.model.arch;  // as fit_largest: a learned position table stops the search
  r.limit = target == FitTarget::seq_len && arch && arch->max_seq_len > 0
                ? std::min(max, arch->max_seq_len)
                : max;
  NeedCache need;
  constexpr std::array<Recompute, 3> kRecompute = {Recompute::none, Recompute::selective,
                                                   Recompute::full};
  const std::vector<ParallelSpec> candidates = candidate_layouts(run, gpus, fixed);
  const u64 total = candidates.size() * (fixed.recompute ? 1 : kRecompute.size());
  u64 done = 0;
  for (const ParallelSpec& p : candidates) {
    for (Recompute rc : kRecompute) {
      if (fixed.recompute && rc != *fixed.recompute) continue;
      if (progress) progress(done++, total);
      point.parallel = p;
      point.training.recompute = rc;
      try {
        check_layout(point);
      } catch (const Error&) {
        continue;
      }
      ++r.tried;
      if (auto f = try_layout(point, budget, target, max, need)) r.fits.push_back(*f);
    }
  }
  if (progress) progress(total, total);
  std::stable_sort(r.fits.begin(), r.fits.end(), [&](const LayoutFit& a, const LayoutFit& b) {
    if (target == FitTarget::seq_len && a.largest != b.largest) return a.largest > b.largest;
    return a.headroom > b.headroom;
  });
  return r;
}

}  // namespace memest
