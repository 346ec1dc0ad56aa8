// Pipeline schedules as event lists (src/parallel/schedule.hpp): the orders against the
// frameworks' algorithms computed another way, hand-derived tables, and what a stage holds.
#include "parallel/schedule.hpp"

#include "testutil.hpp"

#include <memest/units.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>
#include <string>

namespace memest::test {
namespace {

using Kind = PipeAction::Kind;

std::string text_of(const std::vector<PipeAction>& actions) {
  std::string out;
  for (const PipeAction& a : actions) {
    const char k = a.kind == Kind::forward      ? 'F'
                   : a.kind == Kind::backward   ? 'B'
                   : a.kind == Kind::input_grad ? 'I'
                                                : 'W';
    out += fmt::format("{}{}.{} ", k, a.microbatch, a.chunk);
  }
  if (!out.empty()) out.pop_back();
  return out;
}

// Megatron-LM's interleaved schedule (schedules.py @ d98e8a64ddf3) as it computes it: the
// schedule table of micro-batch groups of n (microbatch_group_size_per_vp_stage, p by default), a
// virtual micro-batch k's micro-batch and chunk looked up in it (the backward's chunk mirrored),
// the warm-up of get_pp_rank_microbatches, then forward k + warm-up and backward k in each steady
// step. With v = 1 it is the 1F1B of the non-interleaved function.
std::vector<PipeAction> megatron_order(u64 p, u64 v, u64 m, u64 rank, u64 n = 0) {
  if (n == 0) n = p;
  std::vector<std::pair<u64, u64>> table;  // (micro-batch, chunk)
  for (u64 group = 0; group < m; group += n) {
    const u64 end = group + n >= m ? m : group + n;
    for (u64 c = 0; c < v; ++c)
      for (u64 i = group; i < end; ++i) table.emplace_back(i, c);
  }
  const u64 total = m * v;
  u64 warmup = v == 1 ? p - rank - 1 : 2 * (p - rank - 1) + (v - 1) * n;
  warmup = std::min(warmup, total);
  const auto fwd = [&](u64 k) {
    return PipeAction{Kind::forward, table[k].first, table[k].second};
  };
  const auto bwd = [&](u64 k) {
    return PipeAction{Kind::backward, table[k].first, v - 1 - table[k].second};
  };
  std::vector<PipeAction> out;
  for (u64 k = 0; k < warmup; ++k) out.push_back(fwd(k));
  for (u64 k = 0; k < total - warmup; ++k) {
    out.push_back(fwd(k + warmup));
    out.push_back(bwd(k));
  }
  for (u64 k = total - warmup; k < total; ++k) out.push_back(bwd(k));
  return out;
}

}  // namespace

TEST_CASE("1F1B and interleaved 1F1B run in Megatron-LM's order on a grid of p, v and m") {
  for (u64 p = 2; p <= 6; ++p) {
    for (u64 v = 1; v <= 4; ++v) {
      for (u64 m = p; m <= 4 * p; m += p) {
        const PipeSchedule s = v == 1 ? PipeSchedule::one_f_one_b : PipeSchedule::interleaved_1f1b;
        for (u64 r = 0; r < p; ++r) {
          INFO("p " << p << " v " << v << " m " << m << " rank " << r);
          CHECK(text_of(rank_actions(s, p, v, m, r)) == text_of(megatron_order(p, v, m, r)));
        }
      }
    }
  }
  // 1F1B with fewer micro-batches than stages: every forward is warm-up.
  CHECK(text_of(rank_actions(PipeSchedule::one_f_one_b, 4, 1, 2, 0)) == "F0.0 F1.0 B0.0 B1.0");
}

// Megatron's microbatch_group_size_per_vp_stage over its whole range: p <= n <= m, the last group
// (m mod n) empty or at least p, and m not a multiple of p where n allows it.
TEST_CASE("interleaved 1F1B in Megatron-LM's micro-batch groups on a grid of n") {
  int checked = 0;
  for (u64 p = 2; p <= 5; ++p) {
    for (u64 v = 2; v <= 4; ++v) {
      for (u64 m = p; m <= 4 * p + 1; ++m) {
        for (u64 n = p; n <= m; ++n) {
          if (m % n != 0 && m % n < p) continue;  // Megatron refuses it
          for (u64 r = 0; r < p; ++r) {
            INFO("p " << p << " v " << v << " m " << m << " n " << n << " rank " << r);
            CHECK(text_of(rank_actions(PipeSchedule::interleaved_1f1b, p, v, m, r, n)) ==
                  text_of(megatron_order(p, v, m, r, n)));
            ++checked;
          }
        }
      }
    }
  }
  CHECK(checked > 1000);
}

// model_parallel_config.py's example (@ d98e8a64ddf3): p 2, v 2, n 3, m 5 runs the forwards
// 0 1 2 0 1 2 3 4 3 4 (chunks 0 0 0 1 1 1 0 0 1 1). Rank 1 warms up with 2(p - 1 - 1) + (v - 1)
// x 3 = 3 forwards (one more than with groups of p = 2), then alternates; its backwards mirror
// the chunks. It holds chunk-0 pairs 0, 1, 2 while it runs chunk 1 of each, and at F4.1 the pairs
// 3.0, 4.0 and 3.1 (a head): three others at its peak, one with the head, where groups of 2 (m 4)
// hold two and no head. Rank 0 warms up with 2 + 3 = 5.
TEST_CASE("Megatron-LM's micro-batch groups of 3 over 2 stages, derived by hand") {
  CHECK(text_of(rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, 5, 1, 3)) ==
        "F0.0 F1.0 F2.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.0 B0.0 F4.0 B1.0 F3.1 B2.0 F4.1 B3.1 "
        "B4.1 B3.0 B4.0");
  CHECK(text_of(rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, 5, 0, 3)) ==
        "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 B0.1 F3.0 B1.1 F4.0 B2.1 F3.1 B0.0 F4.1 B1.0 B2.0 B3.1 "
        "B4.1 B3.0 B4.0");
  const auto walk = [](u64 m, u64 n) {
    return walk_held(rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, m, 1, n), 2, 2, 1);
  };
  CHECK(walk(5, 3).others == HeldChunks{3, 0, 1});
  CHECK(walk(4, 0).others == HeldChunks{2, 0, 0});
  CHECK(walk(4, 2).others == HeldChunks{2, 0, 0});  // n = p is the default
}

// Tables derived by hand from PyTorch's schedules.py @ 00722e648b74.
TEST_CASE("GPipe, looped BFS and the zero-bubble schedules in PyTorch's order") {
  CHECK(text_of(rank_actions(PipeSchedule::gpipe, 2, 1, 3, 1)) == "F0.0 F1.0 F2.0 B0.0 B1.0 B2.0");
  CHECK(text_of(rank_actions(PipeSchedule::looped_bfs, 2, 2, 2, 0)) ==
        "F0.0 F1.0 F0.1 F1.1 B1.1 B0.1 B1.0 B0.0");
  // ZB-V, p 2, m 3, rank 1: one chunk-0 forward, then a chunk-1 and chunk-0 forward, then a
  // chunk-1 forward with its input and weight gradients, the steady step, the cool-down.
  CHECK(text_of(rank_actions(PipeSchedule::zbv_zero_bubble, 2, 2, 3, 1)) ==
        "F0.0 F0.1 F1.0 F1.1 I0.1 W0.1 F2.0 I0.0 W0.0 F2.1 I1.1 W1.1 I1.0 I2.1 I2.0 W1.0 W2.1 "
        "W2.0");
  // Interleaved zero bubble, p 2, v 2, m 2, rank 1: warm-up (v - 1) x 2 + 1 x (p - 1 - r) = 2,
  // input gradients in the 1F1B steps, a weight gradient from the rank-th step on.
  CHECK(text_of(rank_actions(PipeSchedule::interleaved_zero_bubble, 2, 2, 2, 1)) ==
        "F0.0 F1.0 F0.1 I0.1 F1.1 I1.1 W0.1 I0.0 W1.1 I1.0 W0.0 W1.0");
  // Rank 0: warm-up 2 + 1 = 3, a weight gradient after every input gradient from the start.
  CHECK(text_of(rank_actions(PipeSchedule::interleaved_zero_bubble, 2, 2, 2, 0)) ==
        "F0.0 F1.0 F0.1 F1.1 I0.1 W0.1 I1.1 W1.1 I0.0 W0.0 I1.0 W1.0");
  CHECK(chunk_stage(PipeSchedule::zbv_zero_bubble, 4, 1, 1) == 6);
  CHECK(chunk_stage(PipeSchedule::interleaved_1f1b, 4, 1, 1) == 5);
}

// p 2, v 2, m 2. Rank 0 runs all four forwards before its first backward (warm-up 2 + 2 = 4 =
// m x v), so at that backward it holds the three others: two of chunk 0 (with the embeddings).
// Rank 1 warms up with chunk 0 of both micro-batches and then alternates on chunk 1 (the head):
// it holds the two chunk-0 pairs besides the running one, never another head.
TEST_CASE("the interleaved schedule's held pairs, derived by hand") {
  const auto walk = [](u64 rank, u64 m) {
    const auto a = rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, m, rank);
    return walk_held(a, 2, rank == 0 ? 0 : 2, rank == 1 ? 1 : 2);
  };
  CHECK(walk(0, 2).others == HeldChunks{3, 2, 0});
  CHECK(walk(0, 2).max_held == 4);
  CHECK(walk(1, 2).others == HeldChunks{2, 0, 0});
  CHECK(walk(1, 2).max_held == 3);
  // m 4: rank 0 warms up with 2 + 2 = 4 and then holds 4 others at each steady forward.
  CHECK(walk(0, 4).others.chunks == 4);
  CHECK(walk(1, 4).others == HeldChunks{2, 0, 0});
  // GPipe's last stage holds every other micro-batch, each with the head.
  const auto g = rank_actions(PipeSchedule::gpipe, 4, 1, 5, 3);
  CHECK(walk_held(g, 1, 1, 0).others == HeldChunks{4, 0, 4});
}

// The bytes, from first principles: p 2, v 2, m 2 puts one layer in each chunk. Rank 1 holds two
// chunk-0 pairs besides the one it runs (above); looped BFS at m 1 holds one (F0.0 F0.1 B0.1
// B0.0). So the two peaks differ by one pair of one layer without the head. 1F1B over p 4 has a
// one-layer middle stage too: stage 1 holds min(4 - 1, m) micro-batches, so m 4 and m 1 differ
// by two such pairs.
// The pairs held besides the running one at every step: p 2, v 2, m 2 (the table of
// docs/parallelism.md, its "held besides" columns). Rank 0 runs F0.0 F1.0 F0.1 F1.1 B0.1 B1.1
// B0.0 B1.0 and so holds 0, 1, 2, 3 others, then 3, 2, 1, 0 (a backward's pair is the running
// one), the chunk-0 pairs with the embeddings; rank 1 runs F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0
// B1.0: 0, 1, 2, 2, 2, 2, 1, 0, and never another micro-batch's head.
TEST_CASE("the pairs a stage holds at each step of its schedule, derived by hand") {
  const auto series = [](u64 rank) {
    const auto a = rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, 2, rank);
    return held_per_step(a, 2, rank == 0 ? 0 : 2, rank == 1 ? 1 : 2);
  };
  const auto field = [](const std::vector<HeldChunks>& v, u64 HeldChunks::*f) {
    std::vector<u64> out;
    for (const HeldChunks& h : v) out.push_back(h.*f);
    return out;
  };
  const auto r0 = series(0), r1 = series(1);
  CHECK(field(r0, &HeldChunks::chunks) == std::vector<u64>{0, 1, 2, 3, 3, 2, 1, 0});
  CHECK(field(r0, &HeldChunks::with_embedding) == std::vector<u64>{0, 1, 2, 2, 2, 2, 1, 0});
  CHECK(field(r1, &HeldChunks::chunks) == std::vector<u64>{0, 1, 2, 2, 2, 2, 1, 0});
  CHECK(field(r1, &HeldChunks::with_head) == std::vector<u64>(8, 0));
  // Its most is walk_held's peak.
  for (u64 rank = 0; rank < 2; ++rank) {
    const auto a = rank_actions(PipeSchedule::interleaved_1f1b, 2, 2, 2, rank);
    const auto v = field(series(rank), &HeldChunks::chunks);
    CHECK(*std::max_element(v.begin(), v.end()) ==
          walk_held(a, 2, rank == 0 ? 0 : 2, rank == 1 ? 1 : 2).others.chunks);
  }
}

// --plot of a pipeline draws each stage over its schedule (src/report/report_svg.cpp): its
// walk's largest moment with, at each step, the other pairs held then (a chunk's saved layers
// each, and the embeddings' for chunk-0 pairs on rank 0, none in this Llama). Rank 0 of the run
// above holds 0, 1, 2, 3 others in its first four steps: its line rises by one pair a step and
// falls back the same way; its highest step is its peak in the stage table.
TEST_CASE("the pipeline picture draws each stage's held pairs over its schedule") {
  const std::string arch =
      R"({"model_type":"llama","hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,)"
      R"("num_key_value_heads":2,"intermediate_size":688,"vocab_size":1000})";
  TempDir dir("pp-plot");
  const std::string svg = (dir.path / "pp.svg").string();
  const auto doc = run_json({"--architecture", arch, "--batch", "4", "--seq", "512", "--pp", "2",
                             "--vpp", "2", "--microbatches", "2", "--plot", svg});
  const std::string text = read_file(svg);
  const auto bytes_of = [&](int stage) {
    const std::string key = fmt::format("data-stage=\"{}\" data-bytes=\"", stage);
    const auto at = text.find(key);
    REQUIRE(at != std::string::npos);
    std::vector<u64> out;
    std::istringstream in(
        text.substr(at + key.size(), text.find('"', at + key.size()) - at - key.size()));
    for (u64 b = 0; in >> b;) out.push_back(b);
    return out;
  };
  const auto s0 = bytes_of(0), s1 = bytes_of(1);
  REQUIRE(s0.size() == 8);
  REQUIRE(s1.size() == 8);
  const u64 chunk = s0[3] - s0[2];  // one pair of rank 0's chunk 1: its layer, no end
  CHECK(chunk > 0);
  CHECK(s0[2] - s0[1] == chunk);  // chunk-0 pairs: the layer (the embeddings save nothing here)
  CHECK(s0[1] - s0[0] == chunk);
  CHECK(s0[3] == doc["stages"][0]["peak_bytes"].get<u64>());
  CHECK(s0 == std::vector<u64>{s0[0], s0[1], s0[2], s0[3], s0[3], s0[2], s0[1], s0[0]});
  CHECK(s1[3] == s1[2]);  // rank 1 holds 3 pairs from its third step to its sixth
  CHECK(s1[4] == s1[2]);
  CHECK(s1[5] == s1[2]);
}

TEST_CASE("the interleaved last stage's bytes are its held one-layer pairs, exactly") {
  const std::string arch =
      R"({"model_type":"llama","hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,)"
      R"("num_key_value_heads":2,"intermediate_size":688,"vocab_size":1000})";
  const auto peak = [&](std::vector<std::string> args, std::size_t stage) {
    args.insert(args.begin(), {"--architecture", arch, "--batch", "4", "--seq", "512"});
    return run_json(args)["stages"][stage]["peak_bytes"].get<u64>();
  };
  const u64 interleaved = peak({"--pp", "2", "--vpp", "2", "--microbatches", "2"}, 1);
  const u64 bfs =
      peak({"--pp", "2", "--vpp", "2", "--pp-schedule", "looped-bfs", "--microbatches", "1"}, 1);
  const u64 two_pairs =
      peak({"--pp", "4", "--microbatches", "4"}, 1) - peak({"--pp", "4", "--microbatches", "1"}, 1);
  CHECK(two_pairs > 0);
  CHECK(two_pairs % 2 == 0);
  CHECK(interleaved - bfs == two_pairs / 2);
}

TEST_CASE(
    "at the same m, the interleaved last stage holds at most 1F1B's first stage plus a chunk") {
  for (u64 p = 2; p <= 8; ++p) {
    for (u64 v = 2; v <= 4; ++v) {
      for (u64 m = p; m <= 3 * p; m += p) {
        const auto inter = rank_actions(PipeSchedule::interleaved_1f1b, p, v, m, p - 1);
        const auto plain = rank_actions(PipeSchedule::one_f_one_b, p, 1, m, 0);
        // In layers: a pair of the interleaved schedule is a chunk of L/(p v), of 1F1B a stage
        // of L/p = v chunks.
        const u64 interleaved_chunks = walk_held(inter, v, v, v - 1).max_held;
        const u64 plain_chunks = walk_held(plain, 1, 0, 1).max_held * v;
        INFO("p " << p << " v " << v << " m " << m);
        CHECK(interleaved_chunks <= plain_chunks + 1);
      }
    }
  }
}

// DualPipeV, p 2, m 4 (PyTorch's ScheduleDualPipeV, schedules.py @ 1fd7abc2f521), by hand from
// its eight steps. Rank 0 (stages 0 and 3): step 1 two chunk-0 forwards, step 2 one F0 F1 pair,
// step 3 an input and weight gradient of chunk 1 and its next forward, step 4 (m - 2p + r + 1 =
// 1 round) the overlapped F0+B1 and F1+B0, step 5 a full B1 then an overlapped F1+B0, step 6 a
// full B1 and (the half point of an even rank) a split B0, step 7 the queued weight gradient and
// the last split B0, step 8 its weight gradient. Rank 1 (stages 1 and 2): two F0 F1 pairs, two
// rounds whose first F0 and B1 do not overlap, then B1 B0 twice, the second (odd rank) split.
TEST_CASE("DualPipeV's order for p 2, derived by hand") {
  CHECK(text_of(rank_actions(PipeSchedule::dualpipev, 2, 2, 4, 0)) ==
        "F0.0 F1.0 F2.0 F0.1 I0.1 W0.1 F1.1 F3.0 B1.1 F2.1 B0.0 B2.1 F3.1 B1.0 B3.1 I2.0 W2.0 "
        "I3.0 W3.0");
  CHECK(text_of(rank_actions(PipeSchedule::dualpipev, 2, 2, 4, 1)) ==
        "F0.0 F0.1 F1.0 F1.1 F2.0 B0.1 F2.1 B0.0 F3.0 B1.1 F3.1 B1.0 B2.1 B2.0 I3.1 I3.0 W3.1 "
        "W3.0");
  CHECK(schedule_chunks(PipeSchedule::dualpipev, 1) == 2);
  CHECK(chunk_stage(PipeSchedule::dualpipev, 2, 0, 1) == 3);
  CHECK(chunk_stage(PipeSchedule::dualpipev, 2, 1, 0) == 1);
  // Rank 0 holds the most at F3.0: micro-batches 0-2 of chunk 0 (the embeddings) and 1 of chunk
  // 1 (the head) besides the one it runs; a split backward holds its pair to the weight step.
  const auto a = rank_actions(PipeSchedule::dualpipev, 2, 2, 4, 0);
  const HeldAtPeak peak = walk_held(a, 2, 0, 1);
  CHECK(peak.others == HeldChunks{4, 3, 1});
  CHECK(peak.step == 7);
  CHECK(peak.max_held == 5);
}

// Every rank of DualPipeV runs each micro-batch's forward and backward on both its chunks once,
// on a grid of p and m >= 2p; each input gradient has its weight gradient.
TEST_CASE("DualPipeV runs every step once on a grid of p and m") {
  for (u64 p = 1; p <= 5; ++p)
    for (u64 m = 2 * p; m <= 2 * p + 5; ++m)
      for (u64 r = 0; r < p; ++r) {
        CAPTURE(p, m, r);
        const auto a = rank_actions(PipeSchedule::dualpipev, p, 2, m, r);
        for (u64 c = 0; c < 2; ++c)
          for (u64 i = 0; i < m; ++i) {
            const auto count = [&](Kind k) {
              return std::count(a.begin(), a.end(), PipeAction{k, i, c});
            };
            CHECK(count(Kind::forward) == 1);
            CHECK(count(Kind::backward) + count(Kind::input_grad) == 1);
            CHECK(count(Kind::input_grad) == count(Kind::weight_grad));
          }
      }
}

}  // namespace memest::test
