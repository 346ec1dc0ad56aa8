#pragma once
// Pipeline schedules as the frameworks generate them: for each pipeline rank, the ordered list of
// forward, backward (and, for the zero-bubble schedules, input-gradient and weight-gradient)
// steps of each micro-batch and model chunk (docs/parallelism.md, "The schedule walk"). Walking
// a rank's list says which chunks' saved activations it holds at every step.

#include <memest/parallel.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace memest {

/// One step of a rank: what it computes, for which micro-batch and which of its model chunks
/// (0 .. chunks-1, the rank's own numbering).
struct PipeAction {
  enum class Kind : std::uint8_t { forward, backward, input_grad, weight_grad };
  Kind kind = Kind::forward;
  std::uint64_t microbatch = 0;
  std::uint64_t chunk = 0;
  bool operator==(const PipeAction&) const = default;
};

/// The model chunks one rank runs under `schedule`: 1 for GPipe and 1F1B, 2 for the V-shaped
/// schedules, else `virtual_stages`.
std::uint64_t schedule_chunks(PipeSchedule schedule, std::uint64_t virtual_stages);

/// The fewest micro-batches `schedule` runs on `stages` ranks: DualPipeV's 2p (PyTorch's
/// ScheduleDualPipeV refuses fewer), 1 for the others.
std::uint64_t least_microbatches(PipeSchedule schedule, std::uint64_t stages);

/// The global stage (0 .. p x chunks - 1, in the order a micro-batch runs through them) of chunk
/// `chunk` of rank `rank`: looped (chunk x p + rank), or V-shaped for zbv-zero-bubble and
/// dualpipev (rank, then 2p - 1 - rank).
std::uint64_t chunk_stage(PipeSchedule schedule, std::uint64_t stages, std::uint64_t rank,
                          std::uint64_t chunk);

/// The steps of rank `rank` of `stages` over `microbatches` micro-batches with `chunks` model
/// chunks per rank, in the order the framework runs them (idle slots left out). A `group` > 0
/// runs interleaved 1F1B in Megatron-LM's micro-batch groups of that size
/// (microbatch_group_size_per_vp_stage; 0: groups of `stages`, PyTorch's and Megatron's default).
std::vector<PipeAction> rank_actions(PipeSchedule schedule, std::uint64_t stages,
                                     std::uint64_t chunks, std::uint64_t microbatches,
                                     std::uint64_t rank, std::uint64_t group = 0);

/// What a rank holds besides the step it runs, at the step where that is the most.
struct HeldAtPeak {
  HeldChunks others;           ///< the other (micro-batch, chunk) pairs whose activations are held
  std::size_t step = 0;        ///< the index of that step in the rank's list
  std::uint64_t max_held = 0;  ///< the most pairs held at once, the running one included
};

/// Walks `actions`: a pair is held from its forward to its backward (to its weight-gradient step
/// when the schedule has one). `embedding_chunk` / `head_chunk` name the chunk that holds the
/// embeddings / the head (or none: a value >= chunks). The peak is the step whose other held
/// pairs are the most, then hold the most heads, then the most embeddings.
HeldAtPeak walk_held(std::span<const PipeAction> actions, std::uint64_t chunks,
                     std::uint64_t embedding_chunk, std::uint64_t head_chunk);

/// The pairs a rank holds besides the one it runs, at each of `actions` (one entry per step, in
/// order; walk_held's count at every step, its peak the largest): a pair is held from its
/// forward to its backward, or to its weight-gradient step when the schedule has one.
std::vector<HeldChunks> held_per_step(std::span<const PipeAction> actions, std::uint64_t chunks,
                                      std::uint64_t embedding_chunk, std::uint64_t head_chunk);

/// The schedule's name as --pp-schedule spells it.
std::string_view schedule_name(PipeSchedule schedule);

}  // namespace memest
