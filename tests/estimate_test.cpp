#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/estimate.hpp>

#include <catch2/catch.hpp>

#include <string_view>

using namespace memest;
namespace test = memest::test;

namespace {

RunSpec bare(std::uint64_t params, std::string_view policy, OptimizerKind opt) {
  RunSpec r;
  r.model = model_from_count(params);
  r.precision = precision_preset(policy);
  r.optimizer.kind = opt;
  return r;
}

std::uint64_t bytes(const Estimate& e, std::string_view key) { return e.at(key).bytes.value(); }

}  // namespace

TEST_CASE("the seed article's fp32 figures for a 7B model with AdamW", "[estimate][seed]") {
  // 7e9 params x (4 B weights + 4 B grads + 2 x 4 B AdamW states) = 28 + 28 + 56 = 112 GB.
  auto e = estimate(bare(7'000'000'000, "fp32", OptimizerKind::adamw));
  REQUIRE(bytes(e, "params") == 28'000'000'000);
  REQUIRE(bytes(e, "grads") == 28'000'000'000);
  REQUIRE(bytes(e, "optimizer_states") == 56'000'000'000);
  REQUIRE(bytes(e, "working_copies") == 0);
  REQUIRE(bytes(e, "master_weights") == 0);
  REQUIRE(e.total_bytes == 112'000'000'000);
  REQUIRE_FALSE(e.total_complete);  // activations are not estimated without an architecture
  REQUIRE_FALSE(e.at("activations").bytes);
}

TEST_CASE("the seed article's 84 GB needs fp16 grads and fp16 optimizer states",
          "[estimate][seed]") {
  // The article: fp16 weights (14) + fp32 copy (28) = 42 GB, grads + states "in fp16" = 42 GB.
  auto r = bare(7'000'000'000, "mixed", OptimizerKind::adamw);
  PrecisionOverrides o;
  o.grad = Dtype::fp16;
  o.state = Dtype::fp16;
  r.precision = apply_overrides(r.precision, o);
  auto e = estimate(r);
  REQUIRE(bytes(e, "params") + bytes(e, "master_weights") == 42'000'000'000);
  REQUIRE(bytes(e, "grads") + bytes(e, "optimizer_states") == 42'000'000'000);
  REQUIRE(e.total_bytes == 84'000'000'000);
}

TEST_CASE("ZeRO paper: mixed-precision Adam is 16 bytes per parameter", "[estimate]") {
  // Rajbhandari et al. 2020, sec. 3.1: 2 (fp16 weights) + 2 (fp16 grads) + 12 (fp32 master,
  // momentum, variance): 7.5B params give 120e9 bytes.
  auto e = estimate(bare(7'500'000'000, "mixed", OptimizerKind::adam));
  REQUIRE(e.total_bytes == 120'000'000'000);
}

TEST_CASE("Megatron's fp32 main_grad makes it 18 bytes per parameter", "[estimate]") {
  // megatron/training/theoretical_memory_usage.py: 18 bytes/param without a distributed optimizer.
  auto e = estimate(bare(1'000'000'000, "mixed-bf16-fp32grad", OptimizerKind::adam));
  REQUIRE(e.total_bytes == 18'000'000'000);
}

TEST_CASE("each policy follows its mechanism on several counts and optimizers", "[estimate]") {
  // Bytes per parameter by category, written out per policy: params, working copy, master,
  // grads, and the size of one optimizer state element.
  struct Row {
    std::string policy;
    std::uint64_t param, working, master, grad, state;
  };
  auto row = GENERATE(values<Row>({{"fp32", 4, 0, 0, 4, 4},
                                   {"amp", 4, 2, 0, 4, 4},
                                   {"amp-bf16", 4, 2, 0, 4, 4},
                                   {"mixed", 2, 0, 4, 2, 4},
                                   {"mixed-bf16", 2, 0, 4, 2, 4},
                                   {"mixed-fp32grad", 2, 0, 4, 4, 4},
                                   {"mixed-bf16-fp32grad", 2, 0, 4, 4, 4},
                                   {"bf16", 2, 0, 0, 2, 2},
                                   {"fp16", 2, 0, 0, 2, 2}}));
  auto n = GENERATE(as<std::uint64_t>{}, 125'000'000, 6'738'415'616, 70'553'706'496);
  auto [opt, states] =
      GENERATE(table<OptimizerKind, std::uint64_t>({{OptimizerKind::sgd, 0},
                                                    {OptimizerKind::sgd_momentum, 1},
                                                    {OptimizerKind::adamw, 2},
                                                    {OptimizerKind::adagrad, 1},
                                                    {OptimizerKind::lion, 1}}));
  CAPTURE(row.policy, n, optimizer_name(opt));
  auto e = estimate(bare(n, row.policy, opt));
  REQUIRE(bytes(e, "params") == row.param * n);
  REQUIRE(bytes(e, "working_copies") == row.working * n);
  REQUIRE(bytes(e, "master_weights") == row.master * n);
  REQUIRE(bytes(e, "grads") == row.grad * n);
  REQUIRE(bytes(e, "optimizer_states") == states * row.state * n);
  REQUIRE(e.total_bytes ==
          (row.param + row.working + row.master + row.grad + states * row.state) * n);
}

TEST_CASE("step counters are host memory unless the optimizer is fused", "[estimate]") {
  RunSpec r;
  r.model.name = "two tensors";
  r.model.inventory.groups.push_back(test::group("w", Role::mlp, 10, 10, 3, true, true));
  r.precision = precision_preset("fp32");
  r.optimizer.kind = OptimizerKind::adam;
  auto e = estimate(r);
  REQUIRE(bytes(e, "optimizer_step") == 12);
  REQUIRE_FALSE(e.at("optimizer_step").on_device);
  REQUIRE(e.total_bytes == 300 * 4 * 4);  // params + grads + 2 states; counters on the host
  r.optimizer.impl = OptimizerImpl::fused;
  REQUIRE(estimate(r).total_bytes == 300 * 4 * 4 + 12);
}

TEST_CASE("frozen parameters get no gradients and no optimizer state", "[estimate]") {
  RunSpec r;
  r.model.inventory.groups.push_back(
      test::group("frozen", Role::embedding, 100, 10, 1, false, false));
  r.model.inventory.groups.push_back(test::group("trained", Role::mlp, 10, 10, 1, true, true));
  r.precision = precision_preset("mixed-bf16");
  r.optimizer.kind = OptimizerKind::adamw;
  auto e = estimate(r);
  REQUIRE(e.params == 1100);
  REQUIRE(e.trainable == 100);
  REQUIRE(bytes(e, "params") == 2200);
  REQUIRE(bytes(e, "master_weights") == 400);
  REQUIRE(bytes(e, "grads") == 200);
  REQUIRE(bytes(e, "optimizer_states") == 800);
}

TEST_CASE("an estimate past 2^64 bytes is an input error", "[estimate]") {
  REQUIRE_THROWS_WITH(estimate(bare(10'000'000'000'000'000'000ULL, "fp32", OptimizerKind::adamw)),
                      Catch::StartsWith("size overflow"));
}

TEST_CASE("ZeRO paper, figure 1: 7.5B parameters, 64 ranks, K = 12", "[estimate][parallel]") {
  // Rajbhandari et al. 2020, fig. 1: per-device model states (2 + 2 + K) * Psi / stage:
  // baseline 120 GB; P_os (2 + 2 + 12/64) * 7.5e9 = 31.4 GB; P_os+g (2 + 14/64) * 7.5e9 =
  // 16.6 GB; P_os+g+p 16/64 * 7.5e9 = 1.9 GB.
  auto r = bare(7'500'000'000, "mixed", OptimizerKind::adam);
  r.parallel.data_parallel = 64;
  auto [stage, total] = GENERATE(table<unsigned, std::uint64_t>(
      {{0, 120'000'000'000}, {1, 31'406'250'000}, {2, 16'640'625'000}, {3, 1'875'000'000}}));
  r.parallel.zero_stage = stage;
  CAPTURE(stage);
  REQUIRE(estimate(r).total_bytes == total);
}

TEST_CASE("the tensors at the peak outside the rows come largest first, ties as first live",
          "[estimate]") {
  for (const auto& policy : {"mixed-bf16", "amp-bf16", "fp32"}) {
    for (const auto& preset : {"gpt2", "llama-2-7b"}) {
      CAPTURE(policy, preset);
      const Estimate e = estimate(test::run_of(preset, policy, 2, 512));
      REQUIRE(e.peak);
      const auto& rows = e.peak_outside_rows;
      REQUIRE(rows.size() > 1);
      // Where each name is first live at the peak: the order that equal sizes keep.
      const auto first_live = [&](std::string_view name) {
        const auto& live = e.peak->live;
        for (std::size_t i = 0; i < live.size(); ++i) {
          if (live[i].name == name) return i;
        }
        FAIL("not live at the peak: " << name);
        return live.size();
      };
      for (std::size_t i = 1; i < rows.size(); ++i) {
        CAPTURE(rows[i - 1].name, rows[i].name);
        REQUIRE(rows[i - 1].bytes >= rows[i].bytes);
        if (rows[i - 1].bytes == rows[i].bytes) {
          REQUIRE(first_live(rows[i - 1].name) < first_live(rows[i].name));
        }
      }
    }
  }
}
