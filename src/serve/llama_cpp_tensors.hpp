#pragma once
// Private to src/serve: a GGUF model's tensors put into llama.cpp's buffers: each layer's
// device, the host for the input layer, the row split of the matrices, and --override-tensor's
// patterns over the tensor names (src/serve/llama_cpp_tensors.cpp).

#include "serve/llama_cpp_split.hpp"

#include <memest/serve.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memest {

/// One weight tensor as llama.cpp's loader sees it.
struct LlamaTensor {
  std::string name;                    ///< GGUF name: "blk.3.ffn_up_exps.weight", "output.weight"
  std::optional<std::uint64_t> layer;  ///< blk.N; none for the input and output layers
  bool input = false;                  ///< token_embd: the input layer, kept on the CPU
  bool tied_copy = false;              ///< the output's copy of a tied token_embd
  bool matrix = false;                 ///< a 2-D GGML_OP_MUL_MAT weight: the row split takes it
  std::uint64_t bytes = 0;             ///< ggml_nbytes
  std::uint64_t rows = 0;              ///< ggml_nrows (a matrix's outputs)
  std::uint64_t ne0 = 0;               ///< elements of a row
  std::uint64_t pad_bytes = 0;         ///< bytes of 512 - ne0 % 512 elements of its type
};

/// The weights' bytes on each device of the placement and in host memory.
struct LlamaWeightBytes {
  std::vector<std::uint64_t> device;
  std::uint64_t host = 0;
  std::uint64_t overridden = 0;  ///< tensors (by name) --override-tensor moved
};

/// The tensors put into buffers as llama_model::load_tensors's create_tensor does: the first
/// --override-tensor pattern found in the name (std::regex_search) decides the buffer; else the
/// input layer is on the CPU, a layer's tensors on its device, the output's on the output
/// device; with the row split a matrix on a device with rows is split over every device; the
/// copy of a tied token_embd only where it lands in another buffer than token_embd. Throws Error
/// naming --override-tensor for a pattern that is not a regular expression or a buffer type
/// that is not CPU or a named device.
LlamaWeightBytes place_llama_cpp_weights(const std::vector<LlamaTensor>& tensors,
                                         const LlamaCppPlacement& placement,
                                         const LlamaCppSettings& settings);

/// Per tensor, the device place_llama_cpp_weights puts it on (kLlamaHost: host memory; under
/// the row split a split matrix's first device).
std::vector<int> llama_cpp_devices(const std::vector<LlamaTensor>& tensors,
                                   const LlamaCppPlacement& placement,
                                   const LlamaCppSettings& settings);

/// Per tensor, whether place_llama_cpp_weights puts it in host memory.
std::vector<bool> llama_cpp_on_host(const std::vector<LlamaTensor>& tensors,
                                    const LlamaCppPlacement& placement,
                                    const LlamaCppSettings& settings);

/// A pattern of tensor names (--override-tensor, --custom-q) as std::regex, refused in one line
/// naming `flag` when it is not a regular expression or would backtrack without bound (a
/// repeated group that repeats, more than two repeats).
std::regex tensor_pattern(const std::string& pattern, std::string_view flag);

/// Patterns of tensor names tried in order, the first found in a name (std::regex_search) giving
/// its value, as llama.cpp's --override-tensor and ik_llama.cpp's --custom-q do; each name is
/// searched once (a layer's experts share one).
template <class T>
class TensorRules {
 public:
  void add(std::regex pattern, T value) { rules_.emplace_back(std::move(pattern), value); }
  bool empty() const { return rules_.empty(); }
  std::optional<T> find(const std::string& name) {
    if (rules_.empty()) return std::nullopt;
    const auto it = seen_.find(name);
    if (it != seen_.end()) return it->second;
    std::optional<T> found;
    for (const auto& [pattern, value] : rules_) {
      if (std::regex_search(name, pattern)) {
        found = value;
        break;
      }
    }
    seen_.emplace(name, found);
    return found;
  }

 private:
  std::vector<std::pair<std::regex, T>> rules_;
  std::map<std::string, std::optional<T>> seen_;
};

}  // namespace memest
