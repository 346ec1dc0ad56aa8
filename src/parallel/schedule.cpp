// Pipeline schedules as event lists (docs/parallelism.md, "The schedule walk"). The orders are
// those of the frameworks' own code, read at these commits:
// - Megatron-LM megatron/core/pipeline_parallel/schedules.py @ d98e8a64ddf3:
//   forward_backward_pipelining_without_interleaving (1F1B: p - rank - 1 warm-up forwards, then
//   one forward and one backward, then the cool-down backwards) and
//   forward_backward_pipelining_with_interleaving (get_pp_rank_microbatches' warm-up
//   2(p - rank - 1) + (v - 1) x group, capped at m x v, which is the all-warm-up case;
//   get_schedule_table's micro-batch groups of microbatch_group_size_per_vp_stage, p by default;
//   megatron_groups below for another group size).
// - PyTorch torch/distributed/pipelining/schedules.py @ 00722e648b74: ScheduleGPipe,
//   Schedule1F1B, ScheduleLoopedBFS, ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble
//   (_get_warmup_ops, _get_1f1b_rank_ops), ScheduleZBVZeroBubble
//   (_calculate_single_rank_operations). Interleaved 1F1B is the same order in both when the
//   micro-batches are a multiple of p (PyTorch's rounds of m / max(1, m / p) micro-batches).
// - PyTorch torch/distributed/pipelining/schedules.py @ 1fd7abc2f521: ScheduleDualPipeV
//   (_calculate_single_rank_operations; it needs m >= 2p micro-batches).
#include "parallel/schedule.hpp"

#include "base/names.hpp"

#include <memest/error.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <array>
#include <deque>
#include <set>
#include <utility>

namespace memest {
namespace {

using Kind = PipeAction::Kind;

constexpr std::array<std::string_view, 7> kScheduleNames = {
    "gpipe",           "1f1b",     "interleaved-1f1b", "looped-bfs", "interleaved-zero-bubble",
    "zbv-zero-bubble", "dualpipev"};

// GPipe: every forward, then every backward, in micro-batch order (ScheduleGPipe).
std::vector<PipeAction> gpipe(u64 m) {
  std::vector<PipeAction> out;
  for (u64 i = 0; i < m; ++i) out.push_back({Kind::forward, i, 0});
  for (u64 i = 0; i < m; ++i) out.push_back({Kind::backward, i, 0});
  return out;
}

// 1F1B: min(p - rank - 1, m) warm-up forwards, then a forward and a backward while forwards
// remain, then the backwards left.
std::vector<PipeAction> one_f_one_b(u64 p, u64 m, u64 rank) {
  const u64 warmup = std::min(p - rank - 1, m);
  std::vector<PipeAction> out;
  u64 f = 0, b = 0;
  while (f < warmup) out.push_back({Kind::forward, f++, 0});
  while (f < m) {
    out.push_back({Kind::forward, f++, 0});
    out.push_back({Kind::backward, b++, 0});
  }
  while (b < m) out.push_back({Kind::backward, b++, 0});
  return out;
}

// Looped BFS: every micro-batch through the rank's first chunk, then its second, ...; the
// backwards in the reverse order of chunks and micro-batches (ScheduleLoopedBFS).
std::vector<PipeAction> looped_bfs(u64 v, u64 m) {
  std::vector<PipeAction> out;
  for (u64 c = 0; c < v; ++c)
    for (u64 i = 0; i < m; ++i) out.push_back({Kind::forward, i, c});
  for (u64 c = v; c-- > 0;)
    for (u64 i = m; i-- > 0;) out.push_back({Kind::backward, i, c});
  return out;
}

// The interleaved schedules' generator (PyTorch's _get_1f1b_rank_ops): warm-up forwards, then a
// forward and a backward (zero bubble: an input gradient, and from the rank-th on a weight
// gradient) per step, then the backwards left, then the weight gradients left.
struct Interleaved {
  u64 p, v, m, rank;
  bool zero_bubble;

  u64 per_round() const { return m / std::max<u64>(1, m / p); }
  u64 warmup() const {
    const u64 w = (v - 1) * per_round() + (zero_bubble ? 1 : 2) * (p - 1 - rank);
    return std::min(w, m * v);
  }
  u64 forward_chunk(u64 op) const { return (op / per_round()) % v; }
  u64 backward_chunk(u64 op) const { return v - 1 - ((op - warmup()) / per_round()) % v; }

  std::vector<PipeAction> actions() const {
    const u64 w = warmup(), total = m * v + w;
    std::vector<u64> fwd(v), bwd(v), wgt(v), backward_ops;
    std::vector<PipeAction> out;
    std::size_t weights = 0;
    const auto weight = [&] {
      const u64 c = backward_chunk(backward_ops[weights++]);
      out.push_back({Kind::weight_grad, wgt[c]++, c});
    };
    const Kind back = zero_bubble ? Kind::input_grad : Kind::backward;
    for (u64 op = 0; op < total; ++op) {
      if (op < m * v) {
        const u64 c = forward_chunk(op);
        out.push_back({Kind::forward, fwd[c]++, c});
      }
      if (op < w) continue;
      const u64 c = backward_chunk(op);
      out.push_back({back, bwd[c]++, c});
      backward_ops.push_back(op);
      if (zero_bubble && op - w >= rank) weight();
    }
    while (zero_bubble && weights < backward_ops.size()) weight();
    return out;
  }
};

// Megatron-LM's interleaved 1F1B with micro-batch groups of n (schedules.py @ d98e8a64ddf3,
// microbatch_group_size_per_vp_stage): get_schedule_table runs each group of n micro-batches (the
// last one the m mod n left) through chunk 0, then chunk 1, ...; the k-th forward is the table's
// k-th entry, the k-th backward the same entry with its chunk mirrored (get_model_chunk_id), each
// chunk's backwards in the order of its forwards (input_tensors[chunk].pop(0)). The warm-up is
// get_pp_rank_microbatches': 2(p - rank - 1) + (v - 1) x n, capped at m x v.
std::vector<PipeAction> megatron_groups(u64 p, u64 v, u64 m, u64 rank, u64 n) {
  std::vector<u64> table;  // the chunk of each virtual micro-batch
  for (u64 first = 0; first < m; first += n) {
    const u64 size = std::min(n, m - first);
    for (u64 c = 0; c < v; ++c) table.insert(table.end(), size, c);
  }
  const u64 total = m * v, warmup = std::min(2 * (p - rank - 1) + (v - 1) * n, total);
  std::vector<u64> fwd(v), bwd(v);
  std::vector<PipeAction> out;
  const auto forward = [&](u64 k) {
    const u64 c = table[k];
    out.push_back({Kind::forward, fwd[c]++, c});
  };
  const auto backward = [&](u64 k) {
    const u64 c = v - 1 - table[k];
    out.push_back({Kind::backward, bwd[c]++, c});
  };
  for (u64 k = 0; k < warmup; ++k) forward(k);
  for (u64 k = 0; k + warmup < total; ++k) {
    forward(k + warmup);
    backward(k);
  }
  for (u64 k = total - warmup; k < total; ++k) backward(k);
  return out;
}

// ZB-V (ScheduleZBVZeroBubble): two chunks per rank in a V; chunk 0 is stage `rank`, chunk 1
// stage 2p - 1 - rank. Micro-batches past m in its padded count (at least 2p - 1) are idle slots.
std::vector<PipeAction> zbv(u64 p, u64 m, u64 rank) {
  const u64 n = std::max(2 * p - 1, m);
  std::vector<PipeAction> out;
  u64 f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  const auto add = [&](Kind k, u64& counter, u64 chunk) { out.push_back({k, counter++, chunk}); };
  for (u64 i = 0; i < 2 * (p - rank) - 1; ++i) add(Kind::forward, f0, 0);
  for (u64 i = 0; i < rank; ++i) {
    add(Kind::forward, f1, 1);
    add(Kind::forward, f0, 0);
  }
  for (u64 i = 0; i < p - rank; ++i) {
    add(Kind::forward, f1, 1);
    out.push_back({Kind::input_grad, b1, 1});
    add(Kind::weight_grad, b1, 1);
  }
  while (f1 < f0 || f0 < n) {
    if (f0 < n) add(Kind::forward, f0, 0);
    out.push_back({Kind::input_grad, b0, 0});
    add(Kind::weight_grad, b0, 0);
    add(Kind::forward, f1, 1);
    out.push_back({Kind::input_grad, b1, 1});
    add(Kind::weight_grad, b1, 1);
  }
  u64 w0 = b0, w1 = b1;
  for (u64 i = 0; i < rank; ++i) {
    add(Kind::input_grad, b0, 0);
    add(Kind::input_grad, b1, 1);
  }
  for (u64 i = 0; i < p - rank; ++i) {
    add(Kind::input_grad, b0, 0);
    add(Kind::weight_grad, w0, 0);
  }
  while (w1 < b1) add(Kind::weight_grad, w1, 1);
  while (w0 < b0) add(Kind::weight_grad, w0, 0);
  std::erase_if(out, [&](const PipeAction& a) { return a.microbatch >= m; });
  return out;
}

// DualPipeV (ScheduleDualPipeV._calculate_single_rank_operations): two chunks per rank in a V,
// as ZB-V, in eight steps. An overlapped forward and full backward (OVERLAP_F_B) is walked as its
// forward, then its backward: both chunks' activations are live while it runs. A full backward
// counts as the input and the weight gradient; an input gradient queues its weight gradient,
// which runs where the schedule pops the oldest of the queue.
struct DualPipeV {
  u64 p, m, rank;
  std::vector<PipeAction> out;
  std::array<u64, 2> forwards{}, backwards{};
  std::deque<PipeAction> weights;

  void forward(u64 c) { out.push_back({Kind::forward, forwards[c]++, c}); }
  void backward(u64 c, bool zero_bubble) {
    out.push_back({zero_bubble ? Kind::input_grad : Kind::backward, backwards[c], c});
    if (zero_bubble) weights.push_back({Kind::weight_grad, backwards[c], c});
    ++backwards[c];
  }
  void pending_weight() {
    if (weights.empty()) return;
    out.push_back(weights.front());
    weights.pop_front();
  }
  void overlapped(u64 forward_chunk, u64 backward_chunk) {
    forward(forward_chunk);
    backward(backward_chunk, false);
  }
  // Steps 6 to 8: the last backwards, the second half of them split (zero bubble), then the
  // weight gradients left.
  void drain() {
    bool zero_bubble = false;
    const u64 half = (rank + 1) / 2;
    for (u64 i = 0; i < rank + 1; ++i) {
      if (i == half && rank % 2 == 1) zero_bubble = true;
      backward(1, zero_bubble);
      if (i == half && rank % 2 == 0) zero_bubble = true;
      backward(0, zero_bubble);
    }
    for (u64 i = 0; i + 1 < p - rank; ++i) {
      pending_weight();
      backward(0, zero_bubble);
    }
    for (u64 i = 0; i < rank + 1; ++i) pending_weight();
  }
  std::vector<PipeAction> actions() {
    for (u64 i = 0; i < 2 * (p - rank - 1); ++i) forward(0);
    for (u64 i = 0; i < rank + 1; ++i) {
      forward(0);
      forward(1);
    }
    for (u64 i = 0; i + 1 < p - rank; ++i) {
      backward(1, true);
      pending_weight();
      forward(1);
    }
    for (u64 i = 0; i + 2 * p < m + rank + 1; ++i) {  // m - 2p + rank + 1 times
      if (i == 0 && rank == p - 1) {                  // not overlapped, to shorten the bubble
        forward(0);
        backward(1, false);
      } else {
        overlapped(0, 1);
      }
      overlapped(1, 0);
    }
    for (u64 i = 0; i + 1 < p - rank; ++i) {
      backward(1, false);
      overlapped(1, 0);
    }
    drain();
    return out;
  }
};

// Whether the schedule splits a backward into an input gradient and a weight gradient.
bool splits_backward(std::span<const PipeAction> actions) {
  return std::any_of(actions.begin(), actions.end(),
                     [](const PipeAction& a) { return a.kind == Kind::weight_grad; });
}

}  // namespace

std::span<const std::string_view> pipe_schedule_names() { return kScheduleNames; }

PipeSchedule parse_pipe_schedule(std::string_view text) {
  return detail::parse_enum<PipeSchedule>(kScheduleNames, text, "pipeline schedule");
}

std::string_view schedule_name(PipeSchedule schedule) {
  return kScheduleNames.at(static_cast<std::size_t>(schedule));
}

u64 least_microbatches(PipeSchedule schedule, u64 stages) {
  return schedule == PipeSchedule::dualpipev ? 2 * stages : 1;
}

u64 schedule_chunks(PipeSchedule schedule, u64 virtual_stages) {
  switch (schedule) {
    case PipeSchedule::gpipe:
    case PipeSchedule::one_f_one_b:
      return 1;
    case PipeSchedule::zbv_zero_bubble:
    case PipeSchedule::dualpipev:
      return 2;
    default:
      return virtual_stages;
  }
}

u64 chunk_stage(PipeSchedule schedule, u64 stages, u64 rank, u64 chunk) {
  const bool v_shape =
      schedule == PipeSchedule::zbv_zero_bubble || schedule == PipeSchedule::dualpipev;
  if (v_shape) return chunk == 0 ? rank : 2 * stages - 1 - rank;
  return chunk * stages + rank;
}

std::vector<PipeAction> rank_actions(PipeSchedule schedule, u64 stages, u64 chunks, u64 m, u64 rank,
                                     u64 group) {
  if (schedule == PipeSchedule::interleaved_1f1b && group > 0)
    return megatron_groups(stages, chunks, m, rank, group);
  switch (schedule) {
    case PipeSchedule::gpipe:
      return gpipe(m);
    case PipeSchedule::one_f_one_b:
      return one_f_one_b(stages, m, rank);
    case PipeSchedule::looped_bfs:
      return looped_bfs(chunks, m);
    case PipeSchedule::interleaved_1f1b:
      return Interleaved{stages, chunks, m, rank, false}.actions();
    case PipeSchedule::interleaved_zero_bubble:
      return Interleaved{stages, chunks, m, rank, true}.actions();
    case PipeSchedule::dualpipev:
      return DualPipeV{stages, m, rank, {}, {}, {}, {}}.actions();
    case PipeSchedule::zbv_zero_bubble:
      break;
  }
  return zbv(stages, m, rank);
}

HeldAtPeak walk_held(std::span<const PipeAction> actions, u64 chunks, u64 embedding_chunk,
                     u64 head_chunk) {
  const bool weights = splits_backward(actions);
  std::set<std::pair<u64, u64>> held;  // (micro-batch, chunk)
  HeldChunks now;
  HeldAtPeak peak;
  bool first = true;
  const auto count = [&](u64 chunk, int sign) {
    const auto step = [&](u64& n) { n = sign > 0 ? n + 1 : n - 1; };
    step(now.chunks);
    if (chunk == embedding_chunk && chunk < chunks) step(now.with_embedding);
    if (chunk == head_chunk && chunk < chunks) step(now.with_head);
  };
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const PipeAction& a = actions[i];
    const auto key = std::make_pair(a.microbatch, a.chunk);
    const bool mine = held.contains(key);
    if (mine) count(a.chunk, -1);  // the step's own pair is walked as the running one
    const auto rank = [](const HeldChunks& h) {
      return std::array<u64, 3>{h.chunks, h.with_head, h.with_embedding};
    };
    if (first || rank(now) > rank(peak.others)) {
      peak.others = now;
      peak.step = i;
      first = false;
    }
    peak.max_held = std::max(peak.max_held, now.chunks + 1);
    const bool released = a.kind == Kind::backward || a.kind == Kind::weight_grad ||
                          (a.kind == Kind::input_grad && !weights);
    if (a.kind == Kind::forward) held.insert(key);
    if (released) held.erase(key);
    if (!released) count(a.chunk, +1);
  }
  return peak;
}

std::vector<HeldChunks> held_per_step(std::span<const PipeAction> actions, u64 chunks,
                                      u64 embedding_chunk, u64 head_chunk) {
  const bool weights = splits_backward(actions);
  std::set<std::pair<u64, u64>> held;  // (micro-batch, chunk)
  HeldChunks now;
  const auto count = [&](HeldChunks& h, u64 chunk, bool add) {
    const auto step = [&](u64& n) { n = add ? n + 1 : n - 1; };
    step(h.chunks);
    if (chunk == embedding_chunk && chunk < chunks) step(h.with_embedding);
    if (chunk == head_chunk && chunk < chunks) step(h.with_head);
  };
  std::vector<HeldChunks> out;
  out.reserve(actions.size());
  for (const PipeAction& a : actions) {
    const auto key = std::make_pair(a.microbatch, a.chunk);
    HeldChunks others = now;
    if (held.contains(key)) count(others, a.chunk, false);  // the running pair is not an other
    out.push_back(others);
    const bool released = a.kind == Kind::backward || a.kind == Kind::weight_grad ||
                          (a.kind == Kind::input_grad && !weights);
    if (a.kind == Kind::forward && held.insert(key).second) count(now, a.chunk, true);
    if (released && held.erase(key) > 0) count(now, a.chunk, false);
  }
  return out;
}

}  // namespace memest
