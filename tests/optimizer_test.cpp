#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/optimizer.hpp>

#include <catch2/catch.hpp>

using namespace memest;
namespace test = memest::test;

namespace {
// Two tensors: a 1000x500 matrix and a 500-vector, all trainable.
Inventory small_model() {
  Inventory inv;
  inv.groups.push_back(test::group("w", Role::mlp, 1000, 500, 1, true, true));
  inv.groups.push_back(test::group("b", Role::mlp, 1, 500, 1, false, true));
  return inv;
}
}  // namespace

TEST_CASE("full-size states per optimizer", "[optimizer]") {
  const Inventory inv = small_model();  // 500,500 params, 2 tensors
  auto [name, states, step] = GENERATE(table<std::string, std::uint64_t, std::uint64_t>({
      {"sgd", 0, 0},
      {"sgd-momentum", 1, 0},
      {"adam", 2, 8},
      {"adamw", 2, 8},
      {"adagrad", 1, 8},
      {"rmsprop", 1, 8},
      {"lion", 1, 0},
  }));
  CAPTURE(name);
  OptimizerSpec spec;
  spec.kind = parse_optimizer(name);
  auto ob = optimizer_bytes(spec, inv, Dtype::fp32);
  REQUIRE(ob.state_bytes == states * 4 * 500'500);
  REQUIRE(ob.step_bytes == step);
  auto half = optimizer_bytes(spec, inv, Dtype::bf16);
  REQUIRE(half.state_bytes == states * 2 * 500'500);
}

TEST_CASE("optional states", "[optimizer]") {
  const Inventory inv = small_model();
  OptimizerSpec s;
  s.kind = OptimizerKind::adam;
  s.amsgrad = true;
  REQUIRE(optimizer_bytes(s, inv, Dtype::fp32).state_bytes == 3 * 4 * 500'500);
  s = {};
  s.kind = OptimizerKind::rmsprop;
  s.momentum = true;
  s.centered = true;
  REQUIRE(optimizer_bytes(s, inv, Dtype::fp32).state_bytes == 3 * 4 * 500'500);
}

TEST_CASE("adafactor factors matrices into rows + columns", "[optimizer]") {
  OptimizerSpec s;
  s.kind = OptimizerKind::adafactor;
  auto ob = optimizer_bytes(s, small_model(), Dtype::fp32);
  // matrix: 1000 + 500 row/col entries; vector: full 500; a 0-dim fp32 RMS per tensor (2)
  REQUIRE(ob.state_bytes == 4 * (1500 + 500) + 4 * 2);
  s.first_moment = true;
  REQUIRE(optimizer_bytes(s, small_model(), Dtype::fp32).state_bytes ==
          4 * (1500 + 500 + 500'500) + 4 * 2);
  // Its states come from the gradient upcast to fp32: fp32 under a bf16 policy too.
  REQUIRE(optimizer_bytes(s, small_model(), Dtype::bf16).state_bytes ==
          4 * (1500 + 500 + 500'500) + 4 * 2);
  auto bare = optimizer_bytes(s, model_from_count(1'000'000).inventory, Dtype::fp32);
  REQUIRE(bare.assumptions.size() == 1);
  REQUIRE(bare.state_bytes == 4 * (2000 + 1'000'000));
}

TEST_CASE("adam8bit: uint8 states, fp32 absmax per 256-element block, small tensors fp32",
          "[optimizer]") {
  OptimizerSpec s;
  s.kind = OptimizerKind::adam8bit;
  auto ob = optimizer_bytes(s, small_model(), Dtype::fp32);
  const std::uint64_t blocks = (500'000 + 255) / 256;  // 1954
  REQUIRE(ob.state_bytes == 2 * 500'000 + 8 * blocks + 2048 + 8 * 500);
  REQUIRE(ob.step_bytes == 0);
}

TEST_CASE("a bare count has no tensors to count step counters", "[optimizer]") {
  OptimizerSpec s;
  s.kind = OptimizerKind::adamw;
  auto ob = optimizer_bytes(s, model_from_count(7'000'000'000).inventory, Dtype::fp32);
  REQUIRE(ob.state_bytes == 56'000'000'000);
  REQUIRE_FALSE(ob.step_counted);
}

TEST_CASE("optimizer names", "[optimizer]") {
  REQUIRE(parse_optimizer("sgd+momentum") == OptimizerKind::sgd_momentum);
  REQUIRE_THROWS_WITH(parse_optimizer("adamw8"),
                      "unknown optimizer \"adamw8\" (expected one of: sgd, sgd-momentum, adam, "
                      "adamw, adagrad, rmsprop, lion, adafactor, adam8bit)");
}
