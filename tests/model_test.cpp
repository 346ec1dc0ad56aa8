#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/model.hpp>

#include <catch2/catch.hpp>

using namespace memest;

namespace {

TensorGroup group(std::uint64_t rows, std::uint64_t cols, std::uint64_t count) {
  TensorGroup g;
  g.name = "w";
  g.rows = rows;
  g.cols = cols;
  g.count = count;
  return g;
}

}  // namespace

TEST_CASE("parameter_bytes takes each group's storage dtype", "[model]") {
  Inventory inv;
  inv.groups.push_back(group(10, 10, 3));  // 300 elements in the default dtype
  TensorGroup nf4 = group(3, 3, 2);        // 9 elements per tensor: 5 bytes each in nf4
  nf4.storage = Dtype::nf4;
  inv.groups.push_back(nf4);
  TensorGroup absmax = group(1, 4, 2);  // quantization constants: bytes, but not parameters
  absmax.storage = Dtype::fp32;
  absmax.quant_state = true;
  absmax.trainable = false;
  inv.groups.push_back(absmax);

  auto [dtype, bytes] = GENERATE(table<Dtype, std::uint64_t>({
      {Dtype::fp32, 300 * 4 + 2 * 5 + 2 * 16},
      {Dtype::bf16, 300 * 2 + 2 * 5 + 2 * 16},
      {Dtype::int8, 300 + 2 * 5 + 2 * 16},
  }));
  CHECK(parameter_bytes(inv, dtype) == bytes);
  CHECK(parameter_count(inv) == 300 + 18);
  CHECK(tensor_count(inv) == 5);
  CHECK(trainable_count(inv) == 318);
  CHECK(trainable_tensor_count(inv) == 5);
}

TEST_CASE("an inline architecture gets the Llama layout", "[model]") {
  // truth/cases.jsonl: llama, vocab 1000, hidden 128, MLP 344, 2 layers, 4 heads:
  // 651,904 parameters in 21 tensors.
  Architecture a = memest::test::small_llama_architecture();
  const Inventory inv = build_inventory(a);
  CHECK(parameter_count(inv) == 651904);
  CHECK(tensor_count(inv) == 21);
  // matmul weights: 2 x (4 x 128^2 + 3 x 128 x 344) + lm_head 128,000
  CHECK(matmul_weight_count(inv, false) == 2 * (4 * 128 * 128 + 3 * 128 * 344) + 128000);
  CHECK(active_parameter_count(a, inv) == 651904);
  for (const auto& g : inv.groups) {
    CHECK(g.trainable);
    CHECK(g.matmul == (g.kind != "" && g.name.ends_with(".weight")));
  }
  a.hidden_size = 0;
  REQUIRE_THROWS_AS(build_inventory(a), Error);
}

TEST_CASE("a bare count stands for a canonical Llama-style decoder", "[model]") {
  // 7e9 parameters: hidden 4096 (5e9 <= P < 1e10), layers round((7e9 - 2 x 32000 x 4096) /
  // (12 x 4096^2)) = round(33.46) = 33, MLP 8 x 4096 / 3 = 10923 -> 11008.
  const Architecture a = canonical_architecture(7'000'000'000);
  CHECK(a.hidden_size == 4096);
  CHECK(a.num_layers == 33);
  CHECK(a.intermediate_size == 11008);
  CHECK(a.num_heads == 32);
  const ModelSpec m = model_from_count(7'000'000'000);
  CHECK_FALSE(m.inventory.shapes_known);
  CHECK(parameter_count(m.inventory) == 7'000'000'000);
  CHECK(m.canonical_inventory == build_inventory(a));
}
