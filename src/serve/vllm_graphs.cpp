// The batch sizes vLLM v0.19 captures CUDA graphs for, read from vllm/config/vllm.py
// (VllmConfig._set_cudagraph_sizes, main at 494636b2, the v0.19.0 branch point: 2026-03-30).
// Under the default FULL_AND_PIECEWISE mode every size gets a PIECEWISE graph and the sizes up
// to max_num_seqs a FULL decode graph (v1/cudagraph_dispatcher.py, initialize_cudagraph_keys).
#include "serve/vllm_graphs.hpp"

#include <algorithm>

namespace memest {

std::vector<std::uint64_t> vllm_cudagraph_capture_sizes(std::uint64_t max_num_seqs,
                                                        std::uint64_t max_num_batched_tokens) {
  // decode_query_len is 1 without speculative tokens; the x 2 leaves room for them.
  const std::uint64_t largest =
      std::min({max_num_seqs * 2, std::uint64_t{512}, max_num_batched_tokens});
  std::vector<std::uint64_t> sizes;
  for (const std::uint64_t s : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{4}}) {
    if (s <= largest) sizes.push_back(s);
  }
  for (std::uint64_t s = 8; s < std::min(largest + 1, std::uint64_t{256}); s += 8) {
    sizes.push_back(s);
  }
  for (std::uint64_t s = 256; s <= largest; s += 16) sizes.push_back(s);
  return sizes;
}

}  // namespace memest
