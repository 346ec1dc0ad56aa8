// The split rules of tensor, sequence, pipeline, context and expert parallelism
// (docs/parallelism.md): what one device holds of the model. Sources: Shoeybi et al. 2019
// (Megatron-LM: column- and row-parallel linears, vocabulary-parallel embedding), Korthikanti et
// al. 2022 (sequence parallelism), Narayanan et al. 2021 and Megatron-LM's
// megatron/core/pipeline_parallel/schedules.py (1F1B and interleaved warm-up), Megatron-LM's
// vocab_utils.py (vocabulary padding). The step of one device is then built like any other run.
#include "parallel/layout.hpp"

#include "base/names.hpp"
#include "model/model_state.hpp"
#include "parallel/schedule.hpp"

#include <memest/activation.hpp>
#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memest {
namespace {

constexpr std::array<std::string_view, 4> kDispatcherNames = {"hf", "alltoall", "allgather",
                                                              "torchtitan"};
constexpr std::array<std::string_view, 2> kRoutingNames = {"balanced", "worst"};

u64 round_up_to(u64 v, u64 m) { return checked_mul(ceil_div(v, m), m); }

Architecture full_architecture(const RunSpec& run) {
  if (run.model.arch) return *run.model.arch;
  return canonical_architecture(parameter_count(run.model.inventory));
}

u64 kv_heads(const Architecture& a) { return a.num_kv_heads ? a.num_kv_heads : a.num_heads; }
u64 all_layers(const Architecture& a) { return a.num_layers + a.num_decoder_layers; }

u64 microbatches_of(const RunSpec& run) {
  return run.parallel.microbatches ? run.parallel.microbatches : run.training.grad_accum;
}

// The vocabulary every rank's shard is cut from: padded to a multiple of vocab_multiple x t
// (Megatron-LM vocab_utils.py; its default multiple is 128).
u64 padded_vocab(const Architecture& a, const ParallelSpec& p) {
  return round_up_to(a.vocab_size, checked_mul(p.vocab_multiple, p.tensor));
}

void check_tensor(const Architecture& a, const ParallelSpec& p, std::vector<std::string>& out) {
  const u64 t = p.tensor;
  const auto need = [&](u64 value, std::string_view what) {
    if (value % t != 0)
      out.push_back(
          fmt::format("--tp {}: does not divide the {} ({}); tensor parallelism splits "
                      "them evenly (expected a divisor of {})",
                      t, what, value, value));
  };
  need(a.num_heads, "attention heads");
  const u64 kv = kv_heads(a);
  if (kv % t != 0 && t % kv != 0)
    out.push_back(
        fmt::format("--tp {}: the {} kv heads can be neither split nor replicated "
                    "evenly (expected t to divide them or be a multiple of them)",
                    t, kv));
  need(a.intermediate_size, "MLP width (intermediate_size)");
  if (a.num_experts > 0) need(a.moe_intermediate_size, "expert width (moe_intermediate_size)");
  if (a.shared_expert_size > 0) need(a.shared_expert_size, "shared expert width");
}

// The layers of each of the p x chunks stages a micro-batch runs through, in that order: L / (p x
// chunks) each; or --first-stage-layers / --last-stage-layers on the first and last rank and the
// rest evenly (Megatron-LM's --decoder-first/last-pipeline-num-layers), each rank's share split
// evenly over its chunks; or, when the layers do not split evenly and no counts are given,
// torchtitan's generate_llm_fqn_per_model_part (torchtitan/distributed/pipeline_parallel.py): the
// embeddings and the head counted as one layer each, L + 2 split as evenly as the first stages
// taking one more. A problem is added to `problems` (when given) and the split is empty.
std::vector<u64> even_or_counted(const ParallelSpec& p, u64 v, u64 L,
                                 std::vector<std::string>* problems) {
  const u64 first = p.first_stage_layers, last = p.last_stage_layers;
  const u64 given = (first ? 1U : 0U) + (last ? 1U : 0U), n = p.pipeline * v;
  const auto fail = [&](std::string line) {
    if (problems) problems->push_back(std::move(line));
    return std::vector<u64>{};
  };
  const u64 rest = L - std::min(L, first + last), middle = p.pipeline - std::min(p.pipeline, given);
  const bool fits = first + last <= L && given <= p.pipeline &&
                    (middle == 0 ? rest == 0 : rest % middle == 0 && rest >= middle);
  if (!fits)
    return fail(
        fmt::format("--first-stage-layers {} --last-stage-layers {}: the other {} layers do not "
                    "split evenly over the other {} stages (expected counts that leave a multiple "
                    "of {} layers, at least one each)",
                    first, last, rest, middle, std::max<u64>(1, middle)));
  std::vector<u64> rank_layers(p.pipeline, middle ? rest / middle : 0);
  if (first) rank_layers.front() = first;
  if (last) rank_layers.back() = last;
  std::vector<u64> out(n);
  for (u64 r = 0; r < p.pipeline; ++r) {
    if (rank_layers[r] % v != 0)
      return fail(
          fmt::format("--pp {} --vpp {}: stage {} holds {} layers, which do not split into {} "
                      "model chunks (expected counts that are multiples of {})",
                      p.pipeline, v, r, rank_layers[r], v, v));
    for (u64 c = 0; c < v; ++c)
      out[chunk_stage(p.schedule(), p.pipeline, r, c)] = rank_layers[r] / v;
  }
  return out;
}

std::vector<u64> torchtitan_split(u64 n, u64 L) {
  const u64 per = (L + 2) / n, extra = (L + 2) % n;
  std::vector<u64> out(n);
  for (u64 g = 0; g < n; ++g)
    out[g] = per + (g < extra ? 1 : 0) - (g == 0 ? 1 : 0) - (g + 1 == n ? 1 : 0);
  return out;
}

std::vector<u64> split_layers(const ParallelSpec& p, u64 v, u64 L,
                              std::vector<std::string>* problems) {
  if (p.pipeline <= 1) return {L};  // one stage: the counts of --first/last-stage-layers unused
  const u64 n = checked_mul(p.pipeline, v);
  const bool counted = p.first_stage_layers || p.last_stage_layers;
  if (counted) return even_or_counted(p, v, L, problems);
  if (n <= L && L % n == 0) return std::vector<u64>(n, L / n);
  const auto fail = [&] {
    if (problems)
      problems->push_back(fmt::format(
          "--pp {}{}: {} layers do not split evenly into {} model chunks "
          "(expected p x vpp to divide the layers, or --first-stage-layers / --last-stage-layers)",
          p.pipeline, v > 1 ? fmt::format(" --vpp {}", v) : "", L, n));
    return std::vector<u64>{};
  };
  if (v > 1 || (L + 2) / n < 2) return fail();  // every stage keeps a layer
  return torchtitan_split(n, L);
}

// The model chunks of each rank: the schedule's, and one without a pipeline.
u64 rank_chunks(const ParallelSpec& p) {
  return p.pipeline > 1 ? schedule_chunks(p.schedule(), p.virtual_stages) : 1;
}

// Megatron-LM's rules for its micro-batch groups (schedules.py @ d98e8a64ddf3,
// forward_backward_pipelining_with_interleaving): p <= n <= m, and the last group, m mod n, is
// empty or holds at least p (a ValueError and a RuntimeError there). Only its interleaved 1F1B
// has groups.
void check_group(const ParallelSpec& p, u64 m, bool interleaved, std::vector<std::string>& out) {
  const u64 n = p.microbatch_group;
  if (!interleaved) {
    out.push_back(fmt::format(
        "--pp-microbatch-group {}: only Megatron-LM's interleaved schedule runs micro-batch "
        "groups (expected --vpp 2 or more with --pp-schedule interleaved-1f1b, or no group)",
        n));
  } else if (n < p.pipeline || n > m) {
    out.push_back(fmt::format(
        "--pp-microbatch-group {}: Megatron-LM takes a group of --pp {} to --microbatches {} "
        "micro-batches (expected {} <= N <= {})",
        n, p.pipeline, m, p.pipeline, m));
  } else if (m % n != 0 && m % n < p.pipeline) {
    out.push_back(fmt::format(
        "--pp-microbatch-group {}: the last group of --microbatches {} holds {}, fewer than "
        "--pp {} (Megatron-LM's rule: expected m mod N = 0 or at least p)",
        n, m, m % n, p.pipeline));
  }
}

// A schedule's own rules: one chunk per rank for GPipe and 1F1B, two for ZB-V; the micro-batches
// of the interleaved schedules fill the pipeline (Megatron-LM's rule, and PyTorch's rounds).
void check_schedule(const ParallelSpec& p, u64 m, std::vector<std::string>& out) {
  const PipeSchedule s = p.schedule();
  const auto name = schedule_name(s);
  const bool single = s == PipeSchedule::gpipe || s == PipeSchedule::one_f_one_b;
  if (single && p.virtual_stages > 1)
    out.push_back(
        fmt::format("--pp-schedule {}: one model chunk per rank (expected --vpp 1, or "
                    "interleaved-1f1b, looped-bfs, interleaved-zero-bubble)",
                    name));
  const bool v_shape = s == PipeSchedule::zbv_zero_bubble || s == PipeSchedule::dualpipev;
  if (v_shape && p.virtual_stages > 2)
    out.push_back(
        fmt::format("--vpp {}: {} runs two model chunks per rank in a V "
                    "(expected --vpp 2 or none)",
                    p.virtual_stages, name));
  if (m < least_microbatches(s, p.pipeline))
    out.push_back(
        fmt::format("--microbatches {}: dualpipev needs at least as many micro-batches as its "
                    "2 x --pp {} stages (PyTorch's rule)",
                    m, p.pipeline));
  const bool interleaved = s == PipeSchedule::interleaved_1f1b && p.virtual_stages > 1;
  if (p.microbatch_group > 0) {
    check_group(p, m, interleaved, out);
  } else if (interleaved && m % p.pipeline != 0) {
    out.push_back(
        fmt::format("--microbatches {}: the interleaved schedule needs a multiple of "
                    "--pp {} (Megatron-LM's rule)",
                    m, p.pipeline));
  }
  const u64 rounds = std::max<u64>(1, m / p.pipeline);
  if (s == PipeSchedule::interleaved_zero_bubble && m % rounds != 0)
    out.push_back(
        fmt::format("--microbatches {}: interleaved-zero-bubble runs rounds of m / "
                    "max(1, m / p) micro-batches (expected a multiple of {})",
                    m, rounds));
}

void check_pipeline(const RunSpec& run, const Architecture& a, std::vector<std::string>& out) {
  const auto& p = run.parallel;
  const u64 v = rank_chunks(p);
  if (a.num_decoder_layers > 0) {
    out.push_back(
        fmt::format("--pp {}: pipeline stages of an encoder-decoder model are not "
                    "modelled (expected --pp 1)",
                    p.pipeline));
  } else {
    split_layers(p, v, all_layers(a), &out);
  }
  check_schedule(p, microbatches_of(run), out);
}

void check_context(const RunSpec& run, std::vector<std::string>& out) {
  const auto& p = run.parallel;
  const u64 s = run.training.seq_len, parts = checked_mul(2, p.context);
  if (s > 0 && s % parts != 0)
    out.push_back(
        fmt::format("--cp {}: the sequence of {} tokens does not split into 2 x {} = {} "
                    "equal chunks (causal load balancing; expected a multiple of {})",
                    p.context, s, p.context, parts, parts));
  if (run.training.attention == Attention::eager)
    out.push_back(
        fmt::format("--cp {}: context parallelism runs in the attention kernel "
                    "(expected --attention sdpa or flash)",
                    p.context));
}

void check_experts(const Architecture& a, const ParallelSpec& p, std::vector<std::string>& out) {
  if (a.num_experts == 0) {
    out.push_back(
        fmt::format("--ep {}: the model has no routed experts (expected --ep 1)", p.expert));
  } else if (a.num_experts % p.expert != 0) {
    out.push_back(
        fmt::format("--ep {}: does not divide the {} routed experts (expected a "
                    "divisor of {})",
                    p.expert, a.num_experts, a.num_experts));
  }
}

// torchtitan's MoE layer (torchtitan @ b5bcd76c6, torchtitan/models/common/MOE_SHARDING.md and
// moe_sharding.py): with EP off, TP replicates the layer's tokens and splits each expert's width,
// which memest models; with EP on, the TP ranks route their own N/t tokens to whole experts on an
// expert mesh that borrows them, which it does not. gpt-oss has a MoE layer of its own
// (torchtitan/models/gpt_oss/moe.py: biases, a clamped SwiGLU), not modelled either.
void check_torchtitan_moe(const RunSpec& run, std::vector<std::string>& out) {
  const ParallelSpec& p = run.parallel;
  if (p.tensor > 1 && p.expert > 1)
    out.push_back(fmt::format(
        "--moe-dispatcher torchtitan: torchtitan's MoE under --tp {} with --ep {} routes each "
        "tensor-parallel rank's tokens to whole experts on a mesh that borrows those ranks; not "
        "modelled (expected --tp 1 or --ep 1)",
        p.tensor, p.expert));
  if (full_architecture(run).model_type == "gpt_oss")
    out.emplace_back(
        "--moe-dispatcher torchtitan: torchtitan's gpt-oss has a MoE layer of its own "
        "(torchtitan/models/gpt_oss/moe.py), not modelled (expected --moe-dispatcher hf)");
}

// Megatron-LM's dispatcher routes a model's experts, and its MoE layer refuses tensor parallelism
// without sequence parallelism in training (megatron/core/transformer/moe/moe_layer.py
// @d98e8a64ddf3, MoELayer.forward: "performance may degrade if MoE and tensor parallelism are
// enabled without also enabling sequence parallelism", a ValueError).
void check_dispatcher(const RunSpec& run, std::vector<std::string>& out) {
  const ParallelSpec& p = run.parallel;
  if (p.moe_dispatcher == MoeDispatcher::hf) return;
  const std::string_view name = kDispatcherNames.at(static_cast<std::size_t>(p.moe_dispatcher));
  if (full_architecture(run).num_experts == 0)
    out.push_back(
        fmt::format("--moe-dispatcher {}: the model has no routed experts (expected "
                    "--moe-dispatcher hf)",
                    name));
  if (p.moe_dispatcher == MoeDispatcher::torchtitan) {
    check_torchtitan_moe(run, out);
  } else if (p.tensor > 1 && !p.sequence) {
    out.push_back(
        fmt::format("--moe-dispatcher {}: Megatron-LM's MoE layer refuses --tp {} without sequence "
                    "parallelism (expected --sp)",
                    name, p.tensor));
  }
}

}  // namespace

std::span<const std::string_view> moe_dispatcher_names() { return kDispatcherNames; }
MoeDispatcher parse_moe_dispatcher(std::string_view text) {
  return detail::parse_enum<MoeDispatcher>(kDispatcherNames, text, "MoE dispatcher");
}
std::span<const std::string_view> moe_routing_names() { return kRoutingNames; }
MoeRouting parse_moe_routing(std::string_view text) {
  return detail::parse_enum<MoeRouting>(kRoutingNames, text, "MoE routing");
}

void check_layout(const RunSpec& run) {
  const auto& p = run.parallel;
  std::vector<std::string> problems;
  if (p.sequence && p.tensor == 1)
    problems.emplace_back(
        "--sp: sequence parallelism splits over the tensor-parallel ranks "
        "(expected --tp 2 or more)");
  if (p.virtual_stages > 1 && p.pipeline == 1)
    problems.emplace_back("--vpp: virtual stages need a pipeline (expected --pp 2 or more)");
  if (p.microbatch_group > 0 && p.pipeline == 1)
    problems.emplace_back(
        "--pp-microbatch-group: micro-batch groups are the interleaved schedule's (expected --pp "
        "2 or more and --vpp 2 or more)");
  const bool fsdp_sync = run.training.model_loading == ModelLoading::fsdp_sync;
  if (fsdp_sync && p.pipeline > 1)
    problems.emplace_back(
        "--fsdp-sync-module-states: FSDP1's constructor is replayed for the whole model, not a "
        "pipeline stage (expected --pp 1)");
  check_dispatcher(run, problems);
  if (fsdp_sync && !run.model.inventory.shapes_known)
    problems.emplace_back(
        "--fsdp-sync-module-states: FSDP1's units need the model's tensors (expected --model or "
        "--config, not --params)");
  if (!p.splits_model()) {
    if (!problems.empty()) throw Error(fmt::format("{}", fmt::join(problems, "\n")));
    return;
  }
  const Architecture a = full_architecture(run);
  if (p.tensor > 1) check_tensor(a, p, problems);
  if (p.pipeline > 1) check_pipeline(run, a, problems);
  if (p.context > 1) check_context(run, problems);
  if (p.expert > 1) check_experts(a, p, problems);
  if (p.sequence && run.training.seq_len > 0 &&
      run.training.seq_len % checked_mul(p.tensor, p.context) != 0)
    problems.push_back(
        fmt::format("--sp: the sequence of {} tokens does not split over t x c = "
                    "{} ranks (expected a multiple of {})",
                    run.training.seq_len, p.tensor * p.context, p.tensor * p.context));
  if (!problems.empty()) throw Error(fmt::format("{}", fmt::join(problems, "\n")));
}

namespace {

// The chunks of rank `rank` that hold the embeddings and the head (`chunks` when it has none).
struct Ends {
  u64 embedding, head;
};

Ends ends_of(PipeSchedule s, u64 p, u64 chunks, u64 rank) {
  Ends e{chunks, chunks};
  for (u64 c = 0; c < chunks; ++c) {
    const u64 stage = chunk_stage(s, p, rank, c);
    if (stage == 0) e.embedding = c;
    if (stage + 1 == p * chunks) e.head = c;
  }
  return e;
}

HeldAtPeak walk_stage(const ParallelSpec& p, u64 stage, u64 m) {
  const PipeSchedule s = p.schedule();
  const u64 chunks = rank_chunks(p);
  const Ends e = ends_of(s, p.pipeline, chunks, stage);
  const std::vector<PipeAction> actions =
      rank_actions(s, p.pipeline, chunks, m, stage, p.microbatch_group);
  return walk_held(actions, chunks, e.embedding, e.head);
}

}  // namespace

std::vector<HeldChunks> stage_schedule_held(const RunSpec& run, std::uint64_t stage) {
  const ParallelSpec& p = run.parallel;
  const PipeSchedule s = p.schedule();
  const u64 chunks = rank_chunks(p);
  const Ends e = ends_of(s, p.pipeline, chunks, stage);
  const std::vector<PipeAction> actions =
      rank_actions(s, p.pipeline, chunks, microbatches_of(run), stage, p.microbatch_group);
  return held_per_step(actions, chunks, e.embedding, e.head);
}

std::uint64_t in_flight_microbatches(const ParallelSpec& p, std::uint64_t stage, u64 m) {
  if (p.pipeline <= 1) return 1;
  return walk_stage(p, stage, m).others.chunks + 1;
}

namespace {

// Where a parameter group lives along the pipeline.
enum class Place { first, layers, last };

bool per_layer(const TensorGroup& g, u64 L) {
  return g.name.find('*') != std::string::npos && L > 0 && g.count % L == 0;
}

// Column-parallel modules split their outputs (weight rows, bias); row-parallel ones their
// inputs (weight columns; the bias is added after the reduction, whole on every rank).
enum class Cut { none, rows, cols };

Cut cut_of(const TensorGroup& g) {
  const std::string& k = g.kind;
  const bool low_rank_down = g.name.find("_a_proj") != std::string::npos;  // MLA's compressions
  const bool column = (k == "q" || k == "k" || k == "v" || k == "qkv" || k == "kv" || k == "gate" ||
                       k == "up" || k == "gate_up" || k == "lm_head") &&
                      !low_rank_down;
  const bool row = k == "o" || k == "down";
  const bool bias = g.rows == 1;
  const bool lora_a = g.name.find("lora_A") != std::string::npos;
  const bool lora_b = g.name.find("lora_B") != std::string::npos;
  if (column) {
    if (lora_a) return Cut::none;  // the adapter's input side is the full hidden state
    return bias ? Cut::cols : Cut::rows;
  }
  if (row) {
    if (bias || lora_b) return Cut::none;
    return Cut::cols;
  }
  return Cut::none;
}

struct Share {
  const Architecture* arch = nullptr;
  const RankSpec* rank = nullptr;
  u64 L = 1;
  u64 vocab = 0;  // the padded vocabulary of all ranks
};

// A word embedding or an lm_head whose rows are the vocabulary.
bool vocab_rows(const TensorGroup& g, const Architecture& a) {
  return (g.role == Role::embedding || g.kind == "lm_head") && g.rows == a.vocab_size;
}

TensorGroup split_group(TensorGroup g, const Share& s) {
  const RankSpec& r = *s.rank;
  const u64 t = r.tensor;
  const Architecture& a = *s.arch;
  if (vocab_rows(g, a)) {
    g.rows = s.vocab / t;
    return g;
  }
  if (g.kind == "lm_head" && g.rows == 1 && g.cols == a.vocab_size) {  // the head's bias
    g.cols = s.vocab / t;
    return g;
  }
  if (t > 1) {
    // Fewer kv heads than ranks: each rank holds one kv head, replicated (a k/v weight's rows,
    // or its bias's columns, are one head).
    const bool kv_group = (g.kind == "k" || g.kind == "v") && kv_heads(a) < t;
    const auto cut = [&](u64 n) { return kv_group ? a.head_dim : n / t; };
    switch (cut_of(g)) {
      case Cut::rows:
        g.rows = cut(g.rows);
        break;
      case Cut::cols:
        g.cols = cut(g.cols);
        break;
      case Cut::none:
        break;
    }
  }
  // Expert parallelism: each rank holds E / ep of every MoE layer's routed experts (one tensor
  // per expert, or one [E, ...] tensor per layer whose rows are the experts).
  if (g.role == Role::expert && a.fused_experts) {
    g.rows /= r.expert;
  } else if (g.role == Role::expert) {
    g.count /= r.expert;
  }
  return g;
}

// The groups before the first layer group sit on the first stage, those after the last on the
// last stage; tied embeddings keep a copy on the last stage as its output layer (Megatron-LM's
// shared_embedding_or_output_weight).
Inventory rank_inventory(const Inventory& inv, const Share& s) {
  const RankSpec& r = *s.rank;
  std::size_t first = inv.groups.size(), last = 0;
  for (std::size_t i = 0; i < inv.groups.size(); ++i) {
    if (!per_layer(inv.groups[i], s.L)) continue;
    first = std::min(first, i);
    last = i;
  }
  Inventory out;
  out.shapes_known = true;
  for (std::size_t i = 0; i < inv.groups.size(); ++i) {
    const TensorGroup& g = inv.groups[i];
    const Place place = i < first ? Place::first : i > last ? Place::last : Place::layers;
    if ((place == Place::first && !r.embedding) || (place == Place::last && !r.head)) continue;
    TensorGroup share = split_group(g, s);
    const bool listed = g.name.find('*') != std::string::npos;
    if (place == Place::layers && per_layer(g, s.L)) {
      share.count = share.count / s.L * r.layers;   // split_group's share: E/e experts a layer
    } else if (place == Place::layers && listed) {  // in some layers only (MoE): evenly
      share.count = checked_mul(share.count, r.layers) / s.L;
    } else if (place == Place::layers && r.stage != 0) {
      continue;  // one named layer's tensor (T5's relative bias): the first stage
    }
    if (share.count > 0) out.groups.push_back(std::move(share));
  }
  const auto& a = *s.arch;
  if (a.tied_embeddings && a.lm_head && r.stages > 1 && r.head) {
    TensorGroup head =
        make_group("output_layer.weight (tied copy)", Role::head, s.vocab / r.tensor,
                   a.embedding_dim ? a.embedding_dim : a.hidden_size, 1, {.matmul = true});
    head.kind = "lm_head";
    out.groups.push_back(std::move(head));
  }
  return out;
}

// The dimensions one rank computes with.
Architecture rank_architecture(Architecture a, const Share& s) {
  const RankSpec& r = *s.rank;
  const u64 t = r.tensor, L = s.L, kv = kv_heads(a);
  if (a.head_dim == 0) a.head_dim = a.num_heads ? a.hidden_size / a.num_heads : 0;
  if (a.moe_intermediate_size == 0) a.moe_intermediate_size = a.intermediate_size;
  a.num_heads /= t;
  a.num_kv_heads = std::max<u64>(1, kv / t);
  a.intermediate_size /= t;
  a.moe_intermediate_size /= t;
  a.shared_expert_size /= t;
  a.vocab_size = s.vocab / t;
  a.moe_layers = a.moe_layers * r.layers / std::max<u64>(1, L);
  if (a.num_decoder_layers == 0) a.num_layers = r.layers;
  if (r.stages > 1) a.tied_embeddings = false;  // the last stage has its own output layer
  return a;
}

// The layers of each model chunk of rank `rank`: chunk c is global stage chunk_stage(c) of the
// p x chunks stages, whose layers `split` counts.
std::vector<LayerRange> chunk_ranges(PipeSchedule s, u64 p, const std::vector<u64>& split,
                                     u64 rank) {
  const u64 chunks = split.size() / p;
  std::vector<LayerRange> out;
  for (u64 c = 0; c < chunks; ++c) {
    const u64 g = chunk_stage(s, p, rank, c);
    u64 first = 0;
    for (u64 i = 0; i < g; ++i) first += split[i];
    out.push_back({first, first + split[g] - 1});
  }
  return out;
}

// The device of pipeline stage `stage`: its layers, splits and the micro-batches of its model
// chunks it holds at its peak (the schedule walk).
RankSpec stage_rank_spec(const RunSpec& run, const Architecture& a, u64 stage) {
  const auto& p = run.parallel;
  RankSpec r;
  r.stage = stage;
  r.stages = p.pipeline;
  r.schedule = p.schedule();
  const u64 chunks = rank_chunks(p);
  r.chunks =
      chunk_ranges(r.schedule, p.pipeline, split_layers(p, chunks, all_layers(a), nullptr), stage);
  r.chunk_layers = r.chunks.front().last - r.chunks.front().first + 1;
  r.layers = 0;
  for (const LayerRange& c : r.chunks) r.layers += c.last - c.first + 1;
  r.first_layer = r.chunks.front().first;
  if (p.pipeline > 1) r.held = walk_stage(p, stage, microbatches_of(run)).others;
  r.in_flight = r.held.chunks + 1;
  const Ends e = ends_of(r.schedule, p.pipeline, chunks, stage);
  r.embedding = e.embedding < chunks;
  r.head = e.head < chunks;
  r.tensor = p.tensor;
  r.sequence = p.sequence;
  r.context = p.context;
  r.expert = p.expert;
  r.vocab = padded_vocab(a, p);
  return r;
}

}  // namespace

std::vector<RunSpec> stage_runs(const RunSpec& run) {
  if (!run.parallel.splits_model() || run.rank.split()) return {run};
  check_layout(run);
  const Architecture a = full_architecture(run);
  const Inventory& inv = detail::walk_inventory(run);
  std::vector<RunSpec> out;
  out.reserve(static_cast<std::size_t>(run.parallel.pipeline));
  for (u64 stage = 0; stage < run.parallel.pipeline; ++stage) {
    RunSpec r = run;
    r.rank = stage_rank_spec(run, a, stage);
    const Share s{&a, &r.rank, all_layers(a), r.rank.vocab};
    r.model.arch = rank_architecture(a, s);
    r.model.inventory = rank_inventory(inv, s);
    r.model.active_params = parameter_count(r.model.inventory);
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// The layers of the stages in order, runs of one count shortened: "3, 4 x 14, 2".
std::string counts_text(const std::vector<u64>& split) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < split.size();) {
    std::size_t j = i;
    while (j < split.size() && split[j] == split[i]) ++j;
    parts.push_back(j - i > 1 ? fmt::format("{} x {}", split[i], j - i)
                              : fmt::format("{}", split[i]));
    i = j;
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// Where the stages hold different numbers of layers: how many and why.
std::optional<std::string> uneven_note(const ParallelSpec& p, const Architecture& a) {
  if (p.pipeline <= 1 || a.num_decoder_layers > 0) return std::nullopt;
  const u64 chunks = rank_chunks(p);
  const std::vector<u64> split = split_layers(p, chunks, all_layers(a), nullptr);
  if (split.empty() ||
      std::adjacent_find(split.begin(), split.end(), std::not_equal_to<>()) == split.end())
    return std::nullopt;
  if (p.first_stage_layers || p.last_stage_layers)
    return fmt::format(
        "pipeline stages of {} layers (--first-stage-layers / --last-stage-layers, the rest "
        "evenly)",
        counts_text(split));
  return fmt::format(
      "pipeline stages of {} layers: {} layers do not split evenly over {} stages, so they are "
      "split as torchtitan does "
      "(the embeddings and the head counted as one layer each)",
      counts_text(split), all_layers(a), split.size());
}

std::string schedule_label(PipeSchedule s) {
  if (s == PipeSchedule::one_f_one_b) return "1F1B";
  if (s == PipeSchedule::interleaved_1f1b) return "interleaved 1F1B";
  return std::string(schedule_name(s));
}

}  // namespace

std::vector<std::string> layout_notes(const RunSpec& run) {
  std::vector<std::string> notes;
  const auto& p = run.parallel;
  if (!p.splits_model()) return notes;
  const Architecture a = full_architecture(run);
  if (!run.model.arch)
    notes.push_back(
        fmt::format("bare parameter count split over devices: the canonical decoder "
                    "({} layers, hidden {}) is split; its count differs from the "
                    "given one by the canonical rounding",
                    a.num_layers, a.hidden_size));
  const u64 v = padded_vocab(a, p);
  if (v != a.vocab_size)
    notes.push_back(
        fmt::format("vocabulary padded from {} to {} (a multiple of {} x t = {}), "
                    "{} rows per tensor-parallel rank",
                    a.vocab_size, v, p.vocab_multiple, p.vocab_multiple * p.tensor, v / p.tensor));
  if (kv_heads(a) > 0 && p.tensor > kv_heads(a))  // a state-space model has none
    notes.push_back(
        fmt::format("{} kv heads over --tp {}: each rank holds one kv head, "
                    "replicated over {} ranks",
                    kv_heads(a), p.tensor, p.tensor / kv_heads(a)));
  if (p.pipeline > 1)
    notes.push_back(
        fmt::format("pipeline: {} schedule, {} micro-batches per step; the first "
                    "stage keeps {} in flight",
                    schedule_label(p.schedule()), microbatches_of(run),
                    in_flight_microbatches(p, 0, microbatches_of(run))));
  if (auto note = uneven_note(p, a)) notes.push_back(std::move(*note));
  return notes;
}

}  // namespace memest
