#pragma once
// Private to src/serve: where llama.cpp puts each layer of a model over several GPUs
// (--split-mode, --tensor-split, --main-gpu, --n-gpu-layers) and what the row split puts on each
// device (src/serve/llama_cpp_split.cpp).

#include <memest/serve.hpp>
#include <memest/units.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memest {

/// A layer or tensor kept in host memory (llama.cpp's CPU buffer).
inline constexpr int kLlamaHost = -1;

/// The devices of a launch and the device of every layer, as llama_model::load_tensors assigns
/// them; indices are into `names` (the --device list), kLlamaHost for the CPU.
struct LlamaCppPlacement {
  std::vector<std::string> names;  ///< "CUDA0", ...: every device named, in order
  std::vector<int> layer_device;   ///< per repeating layer
  int output_device = kLlamaHost;  ///< the output layer (output.weight, output_norm)
  bool row = false;                ///< --split-mode row: matrices split by rows over all devices
  std::vector<float> row_start;    ///< row: each device's first row as a fraction of the rows
};

/// The placement of `n_layer` layers under `s`. Throws Error naming the flag for a --main-gpu
/// past the devices, a --tensor-split longer than them or with no positive share.
LlamaCppPlacement place_llama_cpp_layers(std::uint64_t n_layer, const LlamaCppSettings& s);

/// The rows of a matrix of `rows` rows that device `d` holds under the row split: [low, high)
/// as get_row_split computes them, rounded down to 128 rows (mmq_y of Volta and newer).
std::pair<std::uint64_t, std::uint64_t> llama_cpp_row_range(const LlamaCppPlacement& p,
                                                            std::uint64_t rows, std::size_t d);

/// Bytes each device holds of a matrix of `rows` rows of `ne0` elements whose row takes
/// `row_bytes` (a whole number of blocks) and whose padding of 512 - ne0 % 512 elements takes
/// `pad_bytes`: the rows of its range, plus the padding where it holds any.
std::vector<std::uint64_t> llama_cpp_row_split_bytes(const LlamaCppPlacement& p, std::uint64_t rows,
                                                     std::uint64_t ne0, std::uint64_t row_bytes,
                                                     std::uint64_t pad_bytes);

}  // namespace memest
