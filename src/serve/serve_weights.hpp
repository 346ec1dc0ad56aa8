#pragma once
// What vLLM and SGLang share: the weights one tensor-parallel rank stores in a quantization
// method's format (SGLang's linear layers take vLLM's methods by the same names and store the
// same tensors), and the KV bytes one token takes in one layer on one rank. Implemented in
// serve_vllm.cpp, where the formats are read from vLLM's source.

#include <memest/serve.hpp>

#include <cstdint>
#include <string>

namespace memest {

/// The weights of one rank and how they are stored.
struct StoredWeights {
  std::uint64_t bytes = 0;
  std::string basis;
};

/// The weights one rank of `settings.tensor_parallel_size` stores with `settings.quantization`
/// (or the checkpoint's quantization_config) and `settings.dtype` (or the model's). Throws
/// Error for a method the checkpoint cannot take.
StoredWeights vllm_weights_per_rank(const ServeModel& model, const VllmSettings& settings);

/// Elements of one tensor of `group` on one rank of `tp` (vLLM's parallel layers).
std::uint64_t tensor_elements_per_rank(const TensorGroup& group, const Architecture& arch,
                                       std::uint64_t tp);

/// What vLLM's "Model loading took" counts on one rank for parameters stored in `dtype`: the
/// caching allocator's blocks of each parameter as the modules are made and of the rotary
/// tables (vllm_load.cpp).
std::uint64_t vllm_loaded_bytes(const ServeModel& model, Dtype dtype, std::uint64_t tp);

/// The bytes of the model's rotary tables in `dtype` (ServeModel::rope).
std::uint64_t rope_table_bytes(const ServeModel& model, Dtype dtype);

/// KV bytes one token takes in one layer on one rank: MLA's latent and rotary key
/// (kv_lora_rank + qk_rope_head_dim, whole on every rank), else k and v of the rank's kv heads
/// (at least one head per rank).
std::uint64_t kv_bytes_per_layer_token(const Architecture& arch, std::uint64_t kv_width,
                                       std::uint64_t tp);

}  // namespace memest
