#pragma once
// Private to src/serve: ik_llama.cpp's compute buffers of an MLA model's prompt graph (-mla 2/3
// with flash attention), from the graph build_deepseek2 makes (src/serve/ik_mla_graph.cpp).

#include "serve/llama_cpp_split.hpp"

#include <memest/model.hpp>
#include <memest/serve.hpp>

#include <cstdint>
#include <vector>

namespace memest {

/// The f32 KQ mask a llama.cpp graph takes as input, [n_kv x GGML_PAD(n_tokens, 32)] bytes
/// (GGML_KQ_MASK_PAD, ggml/include/ggml.h); with flash attention the graph casts it to f16.
std::uint64_t kq_mask_f32(std::uint64_t n_kv, std::uint64_t tokens);

/// Whether ik_llama.cpp builds an MLA layer's attention on its prompt path (build_deepseek2,
/// src/llama.cpp at 1843ed22: `mla_attn > 1 && flash_attn && pp_opt`, pp_opt = 128 tokens or
/// more): an MLA model with --mla and --flash-attn at `tokens` tokens, the layers not split by
/// rows.
bool mla_prompt_path(const Architecture& a, const LlamaCppSettings& s, const LlamaCppPlacement& p,
                     std::uint64_t tokens);

/// The heads of one group on that path: all heads, halved while the group's f32 keys and values
/// of `n_kv` cells (heads x (qk_nope + v) x n_kv x 4 bytes, in whole MiB) exceed
/// --attention-max-batch MiB and the count stays even.
std::uint64_t mla_group_heads(const Architecture& a, std::uint64_t attn_max_batch,
                              std::uint64_t n_kv);

/// Each device's compute buffer (indices of p.names) for the graph of one micro-batch of
/// `tokens` tokens over `n_kv` cells, as ggml_gallocr sizes it; `host_experts[il]`: layer il's
/// experts are kept in host memory, where the host computes them unless `gpu_takes` (then the
/// first GPU does: ggml_backend_sched_backend_id_from_cur offloads to the first backend that
/// agrees; the weights it copies in are not held here); `n_copies`: the scheduler's copies of
/// each split input (more than one under pipeline parallelism). Throws Error when the graph
/// would have more nodes than ik_llama.cpp's graph holds (llama_model_max_nodes: 65,536).
std::vector<std::uint64_t> mla_prompt_buffers(const Architecture& a, const LlamaCppPlacement& p,
                                              const LlamaCppSettings& s, std::uint64_t n_kv,
                                              std::uint64_t tokens,
                                              const std::vector<bool>& host_experts, bool gpu_takes,
                                              std::uint64_t n_copies);

}  // namespace memest
