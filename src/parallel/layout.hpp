#pragma once
// A run spread over devices: each device's share of the model and of its tensors
// (docs/parallelism.md). The split rules are here; the step of one device is built from its share
// like any other run.

#include <memest/run_spec.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memest {

/// Checks that the layout fits the model: t divides the heads, the kv heads (or they are
/// replicated), the MLP widths; p is at most the layers; c divides the sequence; e divides the
/// experts; the number of micro-batches fills the pipeline. Throws Error, one line per problem,
/// each naming the flag.
void check_layout(const RunSpec& run);

/// The in-flight micro-batches of pipeline stage `stage` at its peak: 1F1B keeps min(p - stage,
/// m); Megatron's interleaved schedule keeps its warm-up plus one, in model-chunk units.
std::uint64_t in_flight_microbatches(const ParallelSpec& p, std::uint64_t stage,
                                     std::uint64_t microbatches);

/// The (micro-batch, chunk) pairs pipeline stage `stage` holds besides the running one at each
/// step of its schedule (src/parallel/schedule.cpp held_per_step over the rank's steps): what
/// --plot draws per stage.
std::vector<HeldChunks> stage_schedule_held(const RunSpec& run, std::uint64_t stage);

/// One RunSpec per pipeline stage, each the share of one device of that stage: its layers, its
/// slice of every split dimension, its vocabulary shard, its in-flight micro-batches; `rank`
/// says which. A run that splits nothing gives itself.
std::vector<RunSpec> stage_runs(const RunSpec& run);

/// What the split did, for the estimate's assumptions: padding, replicated kv heads.
std::vector<std::string> layout_notes(const RunSpec& run);

}  // namespace memest
