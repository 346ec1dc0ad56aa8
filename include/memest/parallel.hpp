#pragma once

#include <memest/dtype.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace memest {

/// The pipeline schedule (--pp-schedule, torchtitan's names for torch.distributed.pipelining's
/// schedules): GPipe, 1F1B (PipeDream-Flush, Megatron's default), interleaved 1F1B (Megatron's
/// and PyTorch's, with virtual stages), looped BFS, interleaved zero bubble (ZB1P), ZB-V and
/// DualPipeV (src/parallel/schedule.cpp).
enum class PipeSchedule : std::uint8_t {
  gpipe,
  one_f_one_b,
  interleaved_1f1b,
  looped_bfs,
  interleaved_zero_bubble,
  zbv_zero_bubble,
  dualpipev,
};

/// The schedules' names as --pp-schedule spells them, in PipeSchedule's order.
std::span<const std::string_view> pipe_schedule_names();
/// Reads a --pp-schedule name; throws Error naming the names.
PipeSchedule parse_pipe_schedule(std::string_view text);

/// How an MoE layer's routed tokens reach their experts (--moe-dispatcher): `hf`, the model
/// code's own layer (every expert on the device loops over its tokens; Hugging Face's Mixtral
/// and DeepSeek blocks), `alltoall`, Megatron-LM's MoEAlltoAllTokenDispatcher with its grouped
/// experts, or `allgather`, its MoEAllGatherTokenDispatcher (every token of the TP x EP group
/// gathered, the rows of the rank's experts picked out) with the same experts, or `torchtitan`,
/// torchtitan's MoE layer (its local or all-to-all token dispatcher and GroupedExperts)
/// (docs/parallelism.md, "Expert parallelism's own memory").
enum class MoeDispatcher : std::uint8_t { hf, alltoall, allgather, torchtitan };
/// The names --moe-dispatcher takes, in MoeDispatcher's order.
std::span<const std::string_view> moe_dispatcher_names();
/// Reads a --moe-dispatcher name; throws Error naming the names.
MoeDispatcher parse_moe_dispatcher(std::string_view text);

/// What a dropless dispatcher's rank is assumed to receive (--moe-routing): `balanced`, its share
/// of the routed tokens (N x top_k rows, the mean over the ranks); `worst`, every token of the
/// expert-parallel group routed to its own experts (e x N x min(top_k, E/e) rows).
enum class MoeRouting : std::uint8_t { balanced, worst };
/// The names --moe-routing takes, in MoeRouting's order.
std::span<const std::string_view> moe_routing_names();
/// Reads a --moe-routing name; throws Error naming the names.
MoeRouting parse_moe_routing(std::string_view text);

/// The (micro-batch, model chunk) pairs whose saved activations a pipeline rank holds besides the
/// one it runs, at its peak (src/parallel/schedule.cpp walks the schedule for them).
struct HeldChunks {
  std::uint64_t chunks = 0;          ///< pairs held
  std::uint64_t with_embedding = 0;  ///< of them, pairs of the chunk with the embeddings
  std::uint64_t with_head = 0;       ///< of them, pairs of the chunk with the head and the loss
  bool operator==(const HeldChunks&) const = default;
};

/// The layers of one model chunk, first and last (inclusive).
struct LayerRange {
  std::uint64_t first = 0, last = 0;
  bool operator==(const LayerRange&) const = default;
};

/// How the run is spread over devices (docs/parallelism.md). Data parallelism with ZeRO
/// (Rajbhandari et al. 2020) shards the model states over the data-parallel ranks: stage 1 the
/// optimizer states and master weights, stage 2 also the gradients, stage 3 also the parameters
/// (FSDP FULL_SHARD; SHARD_GRAD_OP is stage 2). Tensor (Megatron-LM, Shoeybi et al. 2019),
/// sequence (Korthikanti et al. 2022), pipeline, context and expert parallelism split the model
/// and its tensors: src/parallel/layout.cpp gives each device its share.
struct ParallelSpec {
  std::uint64_t data_parallel = 1;  ///< ranks the states are sharded over
  unsigned zero_stage = 0;          ///< 0 (replicated), 1, 2 or 3
  /// ZeRO-Offload (Ren et al. 2021): the master weights, optimizer states and their gradients
  /// live in host memory and the optimizer steps on the CPU; the device keeps the model's
  /// parameters, gradients and activations.
  bool offload_optimizer = false;
  /// Parameter offload (ZeRO-Infinity's offload_param, FSDP's CPUOffload(offload_params=True)):
  /// with ZeRO-3 the parameter and gradient shards live in host memory as well, and the device
  /// holds a layer's gathered parameters only while it runs (and the prefetched next).
  bool offload_params = false;
  std::uint64_t tensor = 1;          ///< tensor-parallel ranks (t)
  bool sequence = false;             ///< sequence parallelism over the tensor-parallel ranks
  std::uint64_t pipeline = 1;        ///< pipeline stages (p)
  std::uint64_t virtual_stages = 1;  ///< model chunks per pipeline rank (interleaved schedule)
  std::uint64_t microbatches = 0;    ///< micro-batches per step on a pipeline; 0 = grad_accum
  /// The layers of the first and of the last pipeline stage (Megatron-LM's
  /// --decoder-first/last-pipeline-num-layers); 0 = the even share. The rest split evenly.
  std::uint64_t first_stage_layers = 0, last_stage_layers = 0;
  /// --pp-schedule; unset: 1F1B, or interleaved 1F1B with virtual stages.
  std::optional<PipeSchedule> pp_schedule;
  /// Megatron-LM's microbatch_group_size_per_vp_stage (--pp-microbatch-group): the interleaved
  /// schedule runs groups of this many micro-batches through a model chunk before the next;
  /// 0 = the pipeline size p, Megatron's default.
  std::uint64_t microbatch_group = 0;
  std::uint64_t context = 1;  ///< context-parallel ranks (the sequence split c ways)
  std::uint64_t expert = 1;   ///< expert-parallel ranks (routed experts split e ways)
  MoeDispatcher moe_dispatcher = MoeDispatcher::hf;  ///< how routed tokens reach the experts
  MoeRouting moe_routing = MoeRouting::balanced;     ///< what a dropless rank receives
  /// Megatron-LM's --moe-expert-capacity-factor: each expert takes at most c x its even share of
  /// the routed tokens and drops the rest; 0 = dropless (moe_routing applies).
  double moe_capacity_factor = 0;
  /// The vocabulary is padded to a multiple of vocab_multiple x t (Megatron's
  /// --make-vocab-size-divisible-by, 128 there; 1 here: padded to a multiple of t only).
  std::uint64_t vocab_multiple = 1;
  /// DDP with gradient_as_bucket_view=True (and Megatron's DDP): the gradients are views into
  /// the all-reduce buckets. Without it, PyTorch DDP's buckets hold a second copy.
  bool bucket_view = false;
  /// PyTorch FSDP (docs/parallelism.md, "FSDP"): 0 when the sharding is ZeRO's (DeepSpeed,
  /// --zero), 1 for FullyShardedDataParallel (flat parameters, one per wrapped unit), 2 for
  /// fully_shard (each parameter sharded on dim 0). --fsdp full|hybrid is ZeRO stage 3,
  /// grad-op stage 2, no-shard stage 0.
  unsigned fsdp_version = 0;
  /// Hybrid sharding (HYBRID_SHARD, FSDP2's 2-D mesh): the ranks one replica is sharded over;
  /// the replicas all-reduce. 0 = every data-parallel rank.
  std::uint64_t shard_group = 0;
  /// FSDP's MixedPrecision: the dtype parameters are all-gathered and computed in, and the
  /// gradients' reduce-scatter dtype; unset = the stored parameters' dtype (and param_dtype).
  std::optional<Dtype> fsdp_param_dtype, fsdp_reduce_dtype;
  /// FSDP1's use_orig_params=True: frozen and trainable parameters share a unit's flat
  /// parameter, whose gradient covers all of it.
  bool fsdp_orig_params = false;
  /// FSDP's no_sync() (FSDP2: set_requires_gradient_sync(False)) around the micro-batches of an
  /// accumulation: nothing is reduce-scattered until the last, so each unit keeps its whole
  /// unsharded gradient (with use_orig_params, over the frozen parameters too) between them.
  bool fsdp_no_sync = false;

  /// The ranks the model states are sharded over: the shard group, or every data-parallel rank.
  constexpr std::uint64_t shard_ranks() const { return shard_group ? shard_group : data_parallel; }
  /// Whether plain DDP (no ZeRO, no FSDP) keeps all-reduce buckets besides the gradients
  /// (FSDP's NO_SHARD all-reduces the flat gradient in place).
  bool ddp_buckets() const {
    return data_parallel > 1 && zero_stage == 0 && !bucket_view && fsdp_version == 0;
  }
  /// The devices the layout spans (expert parallelism runs inside the data-parallel ranks).
  std::uint64_t world_size() const { return data_parallel * tensor * pipeline * context; }
  /// FSDP frees a unit's gathered parameters after its forward (FULL_SHARD, HYBRID_SHARD,
  /// fully_shard's default), not under SHARD_GRAD_OP (reshard_after_forward=False).
  constexpr bool reshard_after_forward() const { return zero_stage >= 3; }
  /// Whether any dimension of the model or of its tensors is split over devices.
  bool splits_model() const { return tensor > 1 || pipeline > 1 || context > 1 || expert > 1; }
  PipeSchedule schedule() const {
    if (pp_schedule) return *pp_schedule;
    return virtual_stages > 1 ? PipeSchedule::interleaved_1f1b : PipeSchedule::one_f_one_b;
  }

  bool operator==(const ParallelSpec&) const = default;
};

/// One device of a split run: which pipeline stage, what it holds of the model, how many
/// micro-batches it keeps activations for. The default is a device holding the whole model.
struct RankSpec {
  std::uint64_t stage = 0, stages = 1;
  std::uint64_t first_layer = 0;  ///< the stage's first layer in the whole model
  std::uint64_t layers = 0;       ///< layers on this device (all its model chunks)
  /// Layers one micro-batch runs through on this device before passing on: a model chunk.
  std::uint64_t chunk_layers = 0;
  /// Micro-batches (chunk-micro-batches when interleaved) whose saved activations are held at
  /// the stage's peak: the one being computed and the others in flight.
  std::uint64_t in_flight = 1;
  /// The others of those, by the chunk they are of (the step walk adds their saved tensors).
  HeldChunks held;
  /// The layers of each model chunk the device holds, in the rank's chunk order.
  std::vector<LayerRange> chunks;
  PipeSchedule schedule = PipeSchedule::one_f_one_b;
  bool embedding = true;  ///< the first stage: the embeddings
  bool head = true;       ///< the last stage: the final norm, the head and the loss
  std::uint64_t tensor = 1;
  bool sequence = false;
  std::uint64_t context = 1;
  std::uint64_t expert = 1;
  std::uint64_t vocab = 0;  ///< the padded vocabulary (all ranks); 0 = not split

  bool split() const { return stages > 1 || tensor > 1 || context > 1 || expert > 1; }
  bool operator==(const RankSpec&) const = default;
};

/// One rank's share of `bytes` spread evenly over `ranks` (rounded up).
constexpr std::uint64_t shard(std::uint64_t bytes, std::uint64_t ranks) {
  return ranks <= 1 ? bytes : bytes / ranks + (bytes % ranks != 0);
}

/// Whether each model state is sharded at this stage.
struct Sharding {
  std::uint64_t ranks = 1;
  bool states = false;          ///< optimizer states, master weights, step temporaries (stage >= 1)
  bool grads = false;           ///< gradients and master gradients (stage >= 2)
  bool params = false;          ///< parameters (stage 3; FSDP's SHARD_GRAD_OP between steps too)
  bool offload = false;         ///< master weights, optimizer states and master grads on the host
  bool offload_params = false;  ///< parameter and gradient shards on the host as well
};

/// The sharding a ParallelSpec implies.
constexpr Sharding sharding_of(const ParallelSpec& p) {
  const bool many = p.shard_ranks() > 1;
  return {p.shard_ranks(),
          p.zero_stage >= 1 && many,
          p.zero_stage >= 2 && many,
          (p.zero_stage >= 3 || (p.fsdp_version > 0 && p.zero_stage == 2)) && many,
          p.offload_optimizer,
          p.offload_params};
}

}  // namespace memest
