#pragma once
// Private to src/serve: a GGUF file type's weights as llama.cpp's quantizer types them and names
// them (src/serve/serve_gguf.cpp), and the llama.cpp estimate given its weights.

#include "serve/llama_cpp_tensors.hpp"

#include <memest/serve.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest {

/// The weights of a model quantised to a GGUF file type ("Q4_K_M", ...): every tensor with
/// llama.cpp's name, its type's bytes and its layer, and the count of quantised tensors per type.
struct GgufWeights {
  std::vector<LlamaTensor> tensors;
  std::map<std::string, std::uint64_t> tensors_by_type;
};

/// The GGUF file types llama.cpp's quantizer is modelled for, as --quantization takes them
/// ("Q4_K_M", ...): the names of the table gguf_weights reads.
std::span<const std::string_view> gguf_file_type_names();

/// The quantizers whose rules gguf_weights knows, as --quantizer takes them: "current",
/// "2023-12".
std::span<const std::string_view> gguf_quantizer_names();
/// The weights of `m` as file type `ftype`, typed by the rules of `quantizer` (one of
/// gguf_quantizer_names), then by `custom_q`'s REGEX=TYPE rules (ik_llama.cpp's --custom-q: the
/// first pattern found in a quantised tensor's name gives its type). Throws Error naming
/// --quantization for an unknown file type, --custom-q for an unknown type or a bad pattern.
GgufWeights gguf_weights(const ServeModel& m, std::string_view ftype,
                         std::string_view quantizer = "current",
                         const std::vector<std::pair<std::string, std::string>>& custom_q = {});

/// What the llama.cpp estimate is given for the weights: the tensors, the basis shown, and
/// whether the weights' note comes after the others (as `--gguf` files have it).
struct LlamaWeightsInput {
  std::vector<LlamaTensor> tensors;
  std::string basis;
  bool note_last = false;
};

/// llama.cpp's estimate (estimate_llama_cpp) with the weights `w` placed on the devices (none:
/// not sized).
ServeEstimate estimate_llama_cpp_weights(const ServeModel& m, const LlamaCppSettings& s,
                                         const LlamaWeightsInput* w);

}  // namespace memest
