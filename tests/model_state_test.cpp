// The model and optimizer state the walk enters (src/model/model_state.cpp): the parameter sums,
// the order of the trainable tensors, the optimizer's states and its step's temporaries.
#include "model/model_state.hpp"

#include "model/optimizer_traits.hpp"
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>

#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

using namespace memest;
using namespace memest::detail;

namespace {

// tests/data/truth's smallest Llama: vocab 1000, hidden 128, MLP 344, 2 layers, 4 heads, untied.
// Per layer: q, k, v, o of 128 x 128 (16,384 each), gate, up, down of 128 x 344 (44,032 each)
// and two norms of 128: 197,888; embed and lm_head 128,000 each, the final norm 128:
// 651,904 parameters.
RunSpec small_llama() {
  const Architecture a = memest::test::small_llama_architecture();
  RunSpec run;
  run.model.inventory = build_inventory(a);
  run.model.arch = a;
  run.precision = precision_preset("fp32");
  return run;
}

ActivationInputs two_layers() {
  ActivationInputs in;
  in.L = 2;
  in.norms = 2;
  return in;
}

OptimizerSpec spec(OptimizerKind kind, OptimizerImpl impl = OptimizerImpl::foreach) {
  OptimizerSpec o;
  o.kind = kind;
  o.impl = impl;
  return o;
}

}  // namespace

TEST_CASE("parameter sums of one layer and of the model", "[model_state]") {
  const RunSpec run = small_llama();
  const ParameterSums s = parameter_sums(run, two_layers());
  CHECK(s.layers == 2);
  CHECK(s.trainable == 651'904);
  CHECK(s.layer_trainable == 197'888);
  CHECK(s.layer_mlp_trainable == 3 * 44'032);
  CHECK(s.layer_o_trainable == 16'384);
  CHECK(s.down_trainable == 44'032);
  CHECK(s.norm_trainable == 128);
  CHECK(s.layer_matmul == 4 * 16'384 + 3 * 44'032);
  CHECK(s.layer_mlp_matmul == 3 * 44'032);
  CHECK(s.layer_o_matmul == 16'384);
  CHECK(s.layer_qkv_matmul == 3 * 16'384);
  CHECK(s.embed_trainable == 128'000);
  CHECK(s.head_trainable == 128 + 128'000);
  CHECK(s.autocast_weights == 2 * (4 * 16'384 + 3 * 44'032) + 128'000);  // the lm_head too
  CHECK(s.matmul_biases == 0);
}

TEST_CASE("the trainable count leaves out frozen weights and quantisation constants",
          "[model_state]") {
  RunSpec run = small_llama();
  for (TensorGroup& g : run.model.inventory.groups) {
    if (g.kind == "q") g.trainable = false;  // the two layers' q projections, 16,384 each
  }
  TensorGroup scales =
      make_group("model.layers.*.self_attn.q_proj.absmax", Role::attention, 1, 64, 2);
  scales.quant_state = true;  // stored, but no parameter
  run.model.inventory.groups.push_back(scales);
  const ParameterSums s = parameter_sums(run, two_layers());
  CHECK(s.trainable == 651'904 - 2 * 16'384);
  CHECK(s.trainable == trainable_count(run.model.inventory));
  CHECK(s.layer_trainable == 197'888 - 16'384);
}

TEST_CASE("a group is per layer when every layer has a share of it", "[model_state]") {
  const TensorGroup q = make_group("model.layers.*.q", Role::attention, 4, 4, 6);
  CHECK(per_layer(q, 2));
  CHECK(per_layer(q, 3));
  CHECK_FALSE(per_layer(q, 4));  // 6 tensors over 4 layers: some layers only (MoE)
  CHECK_FALSE(per_layer(q, 1));
  CHECK_FALSE(per_layer(make_group("model.norm", Role::norm, 1, 4, 2), 2));
}

TEST_CASE("the trainable tensors are visited in parameters() order", "[model_state]") {
  const RunSpec run = small_llama();
  const ParameterSums s = parameter_sums(run, two_layers());
  std::vector<std::pair<u64, u64>> pairs;  // (previous, this) elements
  walk_order(s, [&](u64 prev, u64 n, u64) { pairs.emplace_back(prev, n); });
  const std::vector<std::pair<u64, u64>> expected = {
      {0, 128'000},       // embed_tokens
      {128'000, 16'384},  // the last layer's q_proj
      {16'384, 16'384},   // k_proj
      {16'384, 16'384},   // v_proj
      {16'384, 16'384},   // o_proj
      {16'384, 44'032},   // gate_proj
      {44'032, 44'032},   // up_proj
      {44'032, 44'032},   // down_proj
      {44'032, 128},      // input_layernorm
      {128, 128},         // post_attention_layernorm
      {128, 16'384},      // wrap-around: a layer's first tensor after the one before's last
      {128, 128},         // model.norm
      {128, 128'000},     // lm_head
  };
  CHECK(pairs == expected);
}

// The step shape of small_llama: pair2 = 2 x 128,000 + 128 (lm_head after the final norm),
// pair1 = 16,384 + 128,000 (q_proj after embed_tokens), largest 128,000, group 651,904.
TEST_CASE("each optimizer's step temporaries by implementation", "[model_state]") {
  const RunSpec run = small_llama();
  const ParameterSums s = parameter_sums(run, two_layers());
  const u64 es = 4, eg = 2, all = 651'904;
  auto [kind, foreach, single, fused] = GENERATE_COPY(table<OptimizerKind, u64, u64, u64>({
      {OptimizerKind::adamw, es * all, es * 256'128 + 8 + es, 0},
      {OptimizerKind::adagrad, es * all, es * 144'384 + 8 + es, 0},
      {OptimizerKind::rmsprop, es * all, es * 144'384, 0},  // > es * 128,000 + 8 + es
      {OptimizerKind::lion, 2 * es * 128'000, 2 * es * 128'000, 2 * es * 128'000},
      {OptimizerKind::adafactor, 8 * 128'000, 8 * 128'000, 8 * 128'000},
      {OptimizerKind::sgd, 0, 0, 0},
      {OptimizerKind::sgd_momentum, 0, 0, 0},
      {OptimizerKind::adam8bit, 0, 0, 0},
  }));
  CAPTURE(optimizer_name(kind));
  CHECK(step_temporaries(spec(kind, OptimizerImpl::foreach), s, true, es, eg) == foreach);
  CHECK(step_temporaries(spec(kind, OptimizerImpl::single), s, true, es, eg) == single);
  CHECK(step_temporaries(spec(kind, OptimizerImpl::fused), s, true, es, eg) == fused);
  // A CPU step runs the single-tensor implementation.
  CHECK(step_temporaries(spec(kind, OptimizerImpl::fused), s, false, es, eg) == single);
}

TEST_CASE("optimizer options add temporaries", "[model_state]") {
  const RunSpec run = small_llama();  // the sums point into its inventory
  const ParameterSums s = parameter_sums(run, two_layers());
  OptimizerSpec rms = spec(OptimizerKind::rmsprop);
  rms.centered = true;  // grad_avg: a second group-wide intermediate
  CHECK(step_temporaries(rms, s, true, 4, 2) == 2 * 4 * 651'904);
  OptimizerSpec sgd = spec(OptimizerKind::sgd_momentum);
  sgd.nesterov = true;  // the look-ahead, one gradient-sized tensor per parameter
  CHECK(step_temporaries(sgd, s, true, 4, 2) == 2 * 651'904);
  CHECK(step_temporaries(sgd, s, false, 4, 2) == 0);
}

TEST_CASE("elementwise states and the optimizer's sizes", "[model_state]") {
  RunSpec run = small_llama();
  const ParameterSums s = parameter_sums(run, two_layers());
  const Inventory& inv = run.model.inventory;
  CHECK(state_bytes(spec(OptimizerKind::adamw), inv, s.trainable, Dtype::fp32) == 8 * 651'904);
  OptimizerSpec ams = spec(OptimizerKind::adam);
  ams.amsgrad = true;
  CHECK(elementwise_states(ams) == 3);
  CHECK(state_bytes(ams, inv, s.trainable, Dtype::bf16) == 6 * 651'904);
  CHECK(state_bytes(spec(OptimizerKind::sgd), inv, s.trainable, Dtype::fp32) == 0);
  // Adafactor's states follow the shapes, not the trainable count.
  const OptimizerSpec ada = spec(OptimizerKind::adafactor);
  CHECK(state_bytes(ada, inv, 1, Dtype::fp32) ==
        optimizer_bytes(ada, inv, Dtype::fp32).state_bytes);

  // On CUDA the foreach step keeps its `step` counters on the host; the fused one on the device:
  // 4 B for each of the 21 tensors.
  const OptimizerSpec fused = spec(OptimizerKind::adamw, OptimizerImpl::fused);
  CHECK(optimizer_sizes(run, spec(OptimizerKind::adamw), s, true).step_counter_bytes == 0);
  CHECK(optimizer_sizes(run, fused, s, true).step_counter_bytes == 4 * 21);

  // Paged AdamW: the states of tensors of 100,000 elements or more (embed_tokens and lm_head)
  // live in unified memory; one kernel per tensor, no temporaries, no step tensors.
  OptimizerSpec paged = spec(OptimizerKind::adamw);
  paged.paged = true;
  const OptimizerSizes p = optimizer_sizes(run, paged, s, true);
  CHECK(p.paged_bytes == 2 * 4 * 256'000);
  CHECK(p.state_bytes == 8 * 651'904 - 2 * 4 * 256'000);
  CHECK(p.temporaries == 0);
  CHECK(p.step_counter_bytes == 0);
}

TEST_CASE("a bare count is walked over its canonical inventory", "[model_state]") {
  RunSpec run;
  run.model = model_from_count(1'000'000'000);
  CHECK(&walk_inventory(run) == &run.model.canonical_inventory);
  CHECK(walk_inventory(run) == build_inventory(canonical_architecture(1'000'000'000)));
  const RunSpec shaped = small_llama();
  CHECK(&walk_inventory(shaped) == &shaped.model.inventory);
  run.model.canonical_inventory = {};  // a bare count made by hand, not by model_from_count
  CHECK_THROWS_AS(walk_inventory(run), std::logic_error);
}
