// vLLM's CUDA-graph capture sizes against the list vLLM's own docstring gives for its default
// (vllm/config/vllm.py, _set_cudagraph_sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1,
// 16)) and against the caps on the largest size.
#include "serve/vllm_graphs.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using memest::vllm_cudagraph_capture_sizes;

TEST_CASE("the logs' settings capture 51 sizes from 1 to 512", "[serve][vllm]") {
  // vLLM 0.19 on an H100: max_num_seqs 1024, max_num_batched_tokens 8192 (tests/data/inference).
  const auto sizes = vllm_cudagraph_capture_sizes(1024, 8192);
  CHECK(sizes.size() == 51);
  CHECK(sizes.front() == 1);
  CHECK(sizes.back() == 512);
  CHECK(std::is_sorted(sizes.begin(), sizes.end()));
  CHECK(std::count(sizes.begin(), sizes.end(), 248) == 1);
  CHECK(std::count(sizes.begin(), sizes.end(), 264) == 0);  // every 16 from 256 on
  CHECK(std::count(sizes.begin(), sizes.end(), 272) == 1);
  CHECK(std::count(sizes.begin(), sizes.end(), 3) == 0);
}

TEST_CASE("the largest size is max_num_seqs x 2, capped at 512 and the batch", "[serve][vllm]") {
  // 100 sequences: up to 200, every 8 from 8 on (3 + 25 sizes).
  const auto hundred = vllm_cudagraph_capture_sizes(100, 8192);
  CHECK(hundred.size() == 28);
  CHECK(hundred.back() == 200);
  // 150 sequences: up to 300, the last of the 16-steps at or below it is 288.
  const auto odd = vllm_cudagraph_capture_sizes(150, 8192);
  CHECK(odd.back() == 288);
  CHECK(odd.size() == 3 + 31 + 3);
  // A batch of 6 tokens leaves 1, 2 and 4.
  CHECK(vllm_cudagraph_capture_sizes(1024, 6) == std::vector<std::uint64_t>{1, 2, 4});
  // One sequence: sizes up to 2.
  CHECK(vllm_cudagraph_capture_sizes(1, 8192) == std::vector<std::uint64_t>{1, 2});
}
