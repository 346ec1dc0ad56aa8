#pragma once
// Private to src/serve: a GGUF file type's weights as llama.cpp's quantizer types them and as
// llama.cpp places them between host and GPU (src/serve/serve_gguf.cpp).

#include <memest/serve.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

namespace memest {

/// The weights of a model quantised to a GGUF file type ("Q4_K_M", ...).
struct GgufWeights {
  std::uint64_t device_bytes = 0;  ///< the offloaded layers and, with every layer, the output
  std::uint64_t host_bytes = 0;    ///< token_embd and the layers left on the CPU
  std::map<std::string, std::uint64_t> tensors_by_type;  ///< quantised tensors per ggml type
};

/// The ggml types a weight can take, with their block sizes (ggml's type traits).
std::span<const GgmlType> ggml_weight_types();

/// The GGUF file types llama.cpp's quantizer is modelled for, as --quantization takes them
/// ("Q4_K_M", ...): the names of the table gguf_weights reads.
std::span<const std::string_view> gguf_file_type_names();

/// The weights of `m` as file type `ftype` with the last `gpu_layers` layers on the GPU. Throws
/// Error naming --quantization for an unknown file type.
GgufWeights gguf_weights(const ServeModel& m, std::string_view ftype, std::uint64_t gpu_layers);

}  // namespace memest
