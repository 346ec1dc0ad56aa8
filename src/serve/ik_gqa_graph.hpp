#pragma once
// Private to src/serve: ik_llama.cpp's compute buffers of a Qwen3-MoE model's graph with flash
// attention, from the graph build_qwen3moe makes with each weight in the buffer it was loaded
// into (src/serve/ik_gqa_graph.cpp), so that a GPU computing layers whose weights stay in host
// memory holds the copies of those weights the scheduler makes.

#include "serve/llama_cpp_split.hpp"
#include "serve/llama_cpp_tensors.hpp"

#include <memest/model.hpp>
#include <memest/serve.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace memest {

/// A weight's buffer and bytes, by GGUF name (the experts of a layer summed under one name).
struct PlacedWeight {
  int device = kLlamaHost;
  std::uint64_t bytes = 0;
  std::optional<std::uint64_t> layer;  ///< blk.N; none for the input and output layers
};
using PlacedWeights = std::map<std::string, PlacedWeight>;

/// The weights `tensors` where `devices` (llama_cpp_devices) puts them.
PlacedWeights placed_weights(const std::vector<LlamaTensor>& tensors,
                             const std::vector<int>& devices);

/// Whether the graph sizes the buffers of an ik_llama.cpp launch: flash attention on a
/// Qwen3-MoE model, every layer on a GPU, no row split, and some weight of a layer in host
/// memory (which a GPU computes with once the batch is large enough).
bool gqa_graph_path(const Architecture& a, const LlamaCppSettings& s, const LlamaCppPlacement& p,
                    const PlacedWeights& w);

/// Each device's compute buffer (indices of p.names) for the graph of one micro-batch of
/// `tokens` tokens over `n_kv` cells, as ggml_gallocr sizes it with the scheduler's copies; a GPU
/// takes over an op whose weight is in host memory from 32 rows, an expert op from
/// `expert_from` tokens; `n_copies`: the scheduler's copies of each split input.
std::vector<std::uint64_t> gqa_prompt_buffers(const Architecture& a, const LlamaCppPlacement& p,
                                              const LlamaCppSettings& s, const PlacedWeights& w,
                                              std::uint64_t n_kv, std::uint64_t tokens,
                                              std::uint64_t expert_from, std::uint64_t n_copies);

}  // namespace memest
