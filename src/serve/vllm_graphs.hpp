#pragma once
// Private to src/serve: the batch sizes vLLM captures CUDA graphs for (src/serve/vllm_graphs.cpp).

#include <cstdint>
#include <vector>

namespace memest {

/// vLLM v0.19's default cudagraph_capture_sizes (config/vllm.py, _set_cudagraph_sizes, no
/// speculative decoding): the largest is max_num_seqs x 2 capped at 512 and at
/// max_num_batched_tokens; the sizes are 1, 2, 4, then every 8 below 256, then every 16 up to
/// the largest. Ascending; empty when no size is at least 1.
std::vector<std::uint64_t> vllm_cudagraph_capture_sizes(std::uint64_t max_num_seqs,
                                                        std::uint64_t max_num_batched_tokens);

}  // namespace memest
