// llama.cpp's placement of a model over several GPUs, read in ggml-org/llama.cpp:
// - src/llama-model.cpp at commit 00342301d01add50835550e8a916f12097d94517,
//   llama_model::load_tensors: the split points are --tensor-split, or each device's free memory
//   when it is absent or all zeros, summed and normalised; layer il of n_layer goes to the first
//   device whose split point exceeds (il - i_gpu_start) / act_gpu_layers, with
//   i_gpu_start = max(n_layer - n_gpu_layers, 0) and act_gpu_layers = min(n_gpu_layers,
//   n_layer + 1); layers before i_gpu_start stay on the CPU; the output layer is placed as layer
//   n_layer; the input layer (token_embd) is always on the CPU. The same assignment serves
//   --split-mode row, whose device buffer list puts the split buffer type first
//   (make_gpu_buft_list).
// - src/llama.cpp at commit 01649e61c782d88825d9f5affb6acbad0f57fb9b,
//   llama_prepare_model_devices: --split-mode none keeps the --main-gpu device only.
// - ggml/src/ggml-cuda/ggml-cuda.cu (the CUDA split buffer of the 2025 builds, before the
//   split buffer gave way to the meta device): ggml_backend_cuda_split_buffer_type gives device i
//   the rows from (the shares before i) / (all shares) of --tensor-split, or of each device's
//   total memory when it is all zeros; get_row_split rounds both ends down to get_row_rounding
//   (the largest mmq_y of the devices with rows: 128 from Volta on), the last device ending at
//   the last row; init_tensor pads each device's part by 512 - ne0 % 512 elements.
#include "serve/llama_cpp_split.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {
namespace {

constexpr std::uint64_t kRowRounding = 128;  // get_mmq_y_host on Volta and newer
constexpr std::uint64_t kRowPadding = 512;   // MATRIX_ROW_PADDING

// --tensor-split as llama.cpp keeps it: a float per device, zeros past the values given.
std::vector<float> shares(const LlamaCppSettings& s, std::size_t n) {
  if (s.tensor_split.size() > n) {
    throw Error(fmt::format("--tensor-split: {} values for {} device{} (--device names them)",
                            s.tensor_split.size(), n, n == 1 ? "" : "s"));
  }
  std::vector<float> v(n, 0.0f);
  for (std::size_t i = 0; i < s.tensor_split.size(); ++i) {
    v[i] = static_cast<float>(s.tensor_split[i]);
  }
  const bool all_zero = std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
  // By free memory: every device here is the same --gpu, so each gets the same share.
  if (all_zero) std::fill(v.begin(), v.end(), 1.0f);
  return v;
}

// load_tensors's split points: the shares summed and normalised.
std::vector<float> split_points(std::vector<float> v) {
  float sum = 0.0f;
  for (float& x : v) {
    sum += x;
    x = sum;
  }
  for (float& x : v) x /= sum;
  return v;
}

// The split buffer type's row starts: the shares before each device over all of them.
std::vector<float> row_starts(const std::vector<float>& v) {
  std::vector<float> start(v.size(), 0.0f);
  float sum = 0.0f;
  for (std::size_t i = 0; i < v.size(); ++i) {
    start[i] = sum;
    sum += v[i];
  }
  for (float& x : start) x /= sum;
  return start;
}

}  // namespace

LlamaCppPlacement place_llama_cpp_layers(std::uint64_t n_layer, const LlamaCppSettings& s) {
  LlamaCppPlacement p;
  p.names = s.device_names.empty() ? std::vector<std::string>{"CUDA0"} : s.device_names;
  const std::size_t n = p.names.size();
  if (s.main_gpu >= n) {
    throw Error(fmt::format("--main-gpu: {} is not one of the {} device{} (0 to {})", s.main_gpu, n,
                            n == 1 ? "" : "s", n - 1));
  }
  const std::vector<float> v = shares(s, n);
  if (std::none_of(v.begin(), v.end(), [](float x) { return x > 0.0f; }) ||
      std::any_of(v.begin(), v.end(), [](float x) { return x < 0.0f; })) {
    throw Error("--tensor-split: expected shares >= 0 with one above 0");
  }
  const bool none = s.split_mode == "none";
  p.row = s.split_mode == "row";
  // --split-mode none: the model's one device is --main-gpu, whatever --tensor-split says.
  const std::vector<float> points = split_points(none ? std::vector<float>{1.0f} : v);
  if (p.row) p.row_start = row_starts(v);
  const auto n_gpu_layers =
      static_cast<std::int64_t>(std::min<std::uint64_t>(s.n_gpu_layers, 1ULL << 31));
  const auto layers = static_cast<std::int64_t>(n_layer);
  const std::int64_t i_gpu_start = std::max<std::int64_t>(layers - n_gpu_layers, 0);
  const std::int64_t act_gpu_layers = std::min(n_gpu_layers, layers + 1);
  const auto device_of = [&](std::int64_t il) {
    if (il < i_gpu_start || il - i_gpu_start >= act_gpu_layers) return kLlamaHost;
    const float at = static_cast<float>(il - i_gpu_start) / static_cast<float>(act_gpu_layers);
    const auto d =
        static_cast<int>(std::upper_bound(points.begin(), points.end(), at) - points.begin());
    return none ? static_cast<int>(s.main_gpu) : d;
  };
  p.layer_device.reserve(n_layer);
  for (std::int64_t il = 0; il < layers; ++il) p.layer_device.push_back(device_of(il));
  p.output_device = device_of(layers);
  return p;
}

std::pair<std::uint64_t, std::uint64_t> llama_cpp_row_range(const LlamaCppPlacement& p,
                                                            std::uint64_t rows, std::size_t d) {
  const std::size_t n = p.row_start.size();
  const auto at = [&](std::size_t i) {
    // nrows * tensor_split[i] in float, truncated, then rounded down to the rounding.
    const auto r = static_cast<std::uint64_t>(static_cast<float>(rows) * p.row_start[i]);
    return r - r % kRowRounding;
  };
  const std::uint64_t low = d == 0 ? 0 : at(d);
  const std::uint64_t high = d + 1 == n ? rows : at(d + 1);
  return {low, std::max(low, high)};
}

std::vector<std::uint64_t> llama_cpp_row_split_bytes(const LlamaCppPlacement& p, std::uint64_t rows,
                                                     std::uint64_t ne0, std::uint64_t row_bytes,
                                                     std::uint64_t pad_bytes) {
  std::vector<std::uint64_t> bytes(p.row_start.size(), 0);
  for (std::size_t d = 0; d < bytes.size(); ++d) {
    const auto [low, high] = llama_cpp_row_range(p, rows, d);
    if (high == low) continue;
    bytes[d] = checked_mul(high - low, row_bytes);
    if (ne0 % kRowPadding != 0) bytes[d] = checked_add(bytes[d], pad_bytes);
  }
  return bytes;
}

}  // namespace memest
