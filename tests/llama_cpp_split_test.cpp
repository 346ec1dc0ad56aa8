// llama.cpp's placement of layers over GPUs (src/serve/llama_cpp_split.cpp): each layer's device
// worked out here with whole numbers (layer il is on the first device d whose cumulative share
// exceeds (il - i_gpu_start) / act_gpu_layers), against the published per-device KV buffers of
// tests/data/inference/cases.jsonl, and the row split's ranges and padding by hand.
#include "serve/llama_cpp_split.hpp"

#include <memest/error.hpp>

#include <catch2/catch.hpp>

#include <numeric>

namespace {

using memest::kLlamaHost;
using memest::LlamaCppSettings;

LlamaCppSettings on_devices(std::size_t n) {
  LlamaCppSettings s;
  for (std::size_t i = 0; i < n; ++i) s.device_names.push_back("CUDA" + std::to_string(i));
  return s;
}

// Layers per device and the host's count.
std::vector<std::uint64_t> counts(const memest::LlamaCppPlacement& p) {
  std::vector<std::uint64_t> c(p.names.size() + 1, 0);
  for (const int d : p.layer_device) ++c[d == kLlamaHost ? p.names.size() : std::size_t(d)];
  return c;
}

// The device of layer il by integer arithmetic: the first d with
// (il - start) * total < cumulative_share(d) * act.
int by_hand(std::uint64_t il, std::uint64_t start, std::uint64_t act,
            const std::vector<std::uint64_t>& shares) {
  if (il < start || il - start >= act) return kLlamaHost;
  const std::uint64_t total = std::accumulate(shares.begin(), shares.end(), std::uint64_t{0});
  std::uint64_t cum = 0;
  for (std::size_t d = 0; d < shares.size(); ++d) {
    cum += shares[d];
    if ((il - start) * total < cum * act) return static_cast<int>(d);
  }
  return -2;  // never: the last cumulative share is the total
}

}  // namespace

TEST_CASE("llama.cpp split: layers by equal shares, as the 8-GPU DeepSeek-R1 log", "[serve]") {
  // 61 layers, -ngl 999: i_gpu_start 0, act_gpu_layers 62. The log's KV buffers are 5824 MiB
  // (8 layers of 728 MiB) on CUDA0-2 and 5096 MiB (7 layers) on CUDA3.
  const auto p = memest::place_llama_cpp_layers(61, on_devices(8));
  for (std::uint64_t il = 0; il < 61; ++il) {
    CHECK(p.layer_device[il] == by_hand(il, 0, 62, std::vector<std::uint64_t>(8, 1)));
  }
  CHECK(counts(p) == std::vector<std::uint64_t>{8, 8, 8, 7, 8, 8, 8, 6, 0});
  CHECK(p.output_device == by_hand(61, 0, 62, std::vector<std::uint64_t>(8, 1)));
  CHECK(p.output_device == 7);
}

TEST_CASE("llama.cpp split: --tensor-split shares and partial offload", "[serve]") {
  // Qwen3-235B's 94 layers over an RTX 5090 and a 4090 (-ts 32,24): 55 and 39 layers, the
  // log's 3520 and 2496 MiB of 64 MiB layers.
  LlamaCppSettings s = on_devices(2);
  s.tensor_split = {32, 24};
  const auto p = memest::place_llama_cpp_layers(94, s);
  for (std::uint64_t il = 0; il <= 94; ++il) {
    const int d = il < 94 ? p.layer_device[il] : p.output_device;
    CHECK(d == by_hand(il, 0, 95, {32, 24}));
  }
  CHECK(counts(p) == std::vector<std::uint64_t>{55, 39, 0});
  // DeepSeek-R1 with -ngl 3 over three GPUs: the last three layers, one each; the output and
  // 58 layers on the CPU (the log's 40 MiB per GPU and 2320 MiB in CUDA_Host).
  LlamaCppSettings t = on_devices(3);
  t.n_gpu_layers = 3;
  const auto q = memest::place_llama_cpp_layers(61, t);
  CHECK(counts(q) == std::vector<std::uint64_t>{1, 1, 1, 58});
  CHECK(q.layer_device[58] == 0);
  CHECK(q.layer_device[60] == 2);
  CHECK(q.output_device == kLlamaHost);
  // A zero share (-ts 40,0): every layer on the first device.
  LlamaCppSettings z = on_devices(2);
  z.tensor_split = {40, 0};
  CHECK(counts(memest::place_llama_cpp_layers(32, z)) == std::vector<std::uint64_t>{32, 0, 0});
}

TEST_CASE("llama.cpp split: --split-mode none keeps --main-gpu only", "[serve]") {
  LlamaCppSettings s = on_devices(3);
  s.split_mode = "none";
  s.main_gpu = 1;
  s.tensor_split = {1, 0, 5};  // ignored: one device
  const auto p = memest::place_llama_cpp_layers(32, s);
  CHECK(counts(p) == std::vector<std::uint64_t>{0, 32, 0, 0});
  CHECK(p.output_device == 1);
  CHECK(p.row_start.empty());
}

TEST_CASE("llama.cpp split: the row split's ranges and padding", "[serve]") {
  LlamaCppSettings s = on_devices(3);
  s.split_mode = "row";
  const auto p = memest::place_llama_cpp_layers(64, s);
  REQUIRE(p.row);
  // 5120 rows in thirds: 1706.67 rounds down to 1664 (13 x 128), 3413.3 to 3328.
  CHECK(memest::llama_cpp_row_range(p, 5120, 0) ==
        std::pair<std::uint64_t, std::uint64_t>{0, 1664});
  CHECK(memest::llama_cpp_row_range(p, 5120, 1) ==
        std::pair<std::uint64_t, std::uint64_t>{1664, 3328});
  CHECK(memest::llama_cpp_row_range(p, 5120, 2) ==
        std::pair<std::uint64_t, std::uint64_t>{3328, 5120});
  // 100 rows: the first two devices round to nothing, the last takes all.
  CHECK(memest::llama_cpp_row_range(p, 100, 0).second == 0);
  CHECK(memest::llama_cpp_row_range(p, 100, 2) == std::pair<std::uint64_t, std::uint64_t>{0, 100});
  // A q4_K row of 11008 elements (43 blocks of 144 bytes) pads 256 elements (one block) on each
  // device that holds rows.
  const auto bytes = memest::llama_cpp_row_split_bytes(p, 4096, 11008, 43 * 144, 144);
  // 4096 / 3 = 1365.3 -> 1280; 2730.7 -> 2688.
  CHECK(bytes == std::vector<std::uint64_t>{1280 * 6192 + 144, (2688 - 1280) * 6192 + 144,
                                            (4096 - 2688) * 6192 + 144});
}

TEST_CASE("llama.cpp split: bad --main-gpu and --tensor-split refused", "[serve]") {
  LlamaCppSettings s = on_devices(2);
  s.main_gpu = 2;
  CHECK_THROWS_WITH(memest::place_llama_cpp_layers(32, s),
                    "--main-gpu: 2 is not one of the 2 devices (0 to 1)");
  LlamaCppSettings t = on_devices(2);
  t.tensor_split = {1, 1, 1};
  CHECK_THROWS_WITH(memest::place_llama_cpp_layers(32, t),
                    "--tensor-split: 3 values for 2 devices (--device names them)");
  t.tensor_split = {-1, 2};
  CHECK_THROWS_AS(memest::place_llama_cpp_layers(32, t), memest::Error);
}
