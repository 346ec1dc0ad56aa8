// What a layer, the embedding and the head save for backward (src/step/layer_graph.cpp), checked
// against bytes worked out by hand from the graph's table in docs/activations.md.
#include "model/adapters.hpp"
#include "step/step_build.hpp"
#include "testutil.hpp"

#include <memest/activation.hpp>
#include <memest/hf_config.hpp>
#include <memest/precision.hpp>
#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <string>

using namespace memest;
using memest::test::tiny_llama;

namespace {

Step saved_step(const ActivationInputs& in) {
  Step step;
  detail::add_saved_tensors(step, in);
  return step;
}

std::uint64_t count_of(const Step& step, std::string_view name) {
  for (const Entry& e : step.saved) {
    if (step.tensors[e.tensor].name == name) return e.count;
  }
  return 0;
}

}  // namespace

TEST_CASE("a Llama layer in fp32 with eager attention saves what the table says", "[layer_graph]") {
  // N = b s = 8 tokens. Per layer (docs/activations.md, "Llama graph"), in bytes:
  //   two RMSNorms: fp32 input 4 N h = 2048, rsqrt 4 N = 32, output 4 N h = 2048    8,256
  //   the norm outputs q/k/v and gate/up read: 2 x 4 N h                            4,096
  //   q, k, v, the o_proj input: 4 x 4 N a d                                        8,192
  //   the float64 scale                                                                 8
  //   softmax(dtype=float32) output: 4 b a s^2 = 4 x 4 x 64 (no copy: fp32 scores)  1,024
  //   gated SiLU: gate output, act output, up output, gate x up: 4 x 4 N I         16,384
  const ActivationBytes ab = activation_bytes(*activation_inputs(tiny_llama("fp32", 1, 8)));
  CHECK(ab.full_layer == 37'960);
  CHECK(ab.mlp == 16'384);
  CHECK(ab.per_layer == 37'960);
  // Shared: rotary cos and sin, 2 s d in fp32. Head: the final norm (2048 + 32 + 2048), the
  // lm_head input (2048), the fp32 log-probs 4 N V = 3200, the padded int64 labels of batch 1,
  // 8 (s + 1) = 72, and total_weight's 4.
  CHECK(ab.shared == 1'024);
  CHECK(ab.embed == 0);
  CHECK(ab.head == 9'452);
  CHECK(ab.total == 2 * 37'960 + 1'024 + 9'452);
}

TEST_CASE("Step::saved counts a layer's tensors once per layer, the rest once", "[layer_graph]") {
  const Step step = saved_step(*activation_inputs(tiny_llama("fp32", 2, 8)));
  REQUIRE(!step.saved.empty());
  for (const Entry& e : step.saved) {
    const Tensor& t = step.tensors[e.tensor];
    INFO(t.name);
    const bool layer = t.scope == Scope::layer || t.scope == Scope::dense_mlp;
    CHECK(e.count == (layer ? 2u : 1u));
    CHECK(t.part == Part::activations);
  }
  // The loss target and total_weight are the last saved tensors: the first the loss's backward
  // releases.
  CHECK(step.tensors[step.saved.back().tensor].name == "total_weight (0-d fp32)");
}

TEST_CASE("a frozen embedding: the first layer keeps nothing for its input's gradient",
          "[layer_graph]") {
  RunSpec run = tiny_llama("fp32", 2, 8);
  const std::array<Role, 1> roles = {Role::embedding};
  freeze_roles(run.model.inventory, roles);
  const Step step = saved_step(*activation_inputs(run));
  // The input norm's fp32 input and rsqrt serve its input's gradient only: layer 1 keeps them,
  // layer 0 (whose input is the frozen embedding's output) does not. Its output cast back serves
  // the norm weight's gradient, which every layer computes.
  CHECK(count_of(step, "input RMSNorm: fp32 input (pow, mul)") == 1);
  CHECK(count_of(step, "input RMSNorm: rsqrt (fp32, one per row)") == 1);
  CHECK(count_of(step, "input RMSNorm: output cast back") == 2);
  CHECK(count_of(step, "post-attention RMSNorm: fp32 input") == 2);
}

TEST_CASE("selective recompute stores no attention core, full recompute the layer input",
          "[layer_graph]") {
  RunSpec run = tiny_llama("fp32", 1, 8);
  run.training.recompute = Recompute::selective;
  const ActivationBytes selective = activation_bytes(*activation_inputs(run));
  // The softmax output and the float64 scale are recomputed: 37,960 - 1,024 - 8.
  CHECK(selective.full_layer == 37'960 - 1'024 - 8);
  run.training.recompute = Recompute::full;
  const ActivationBytes full = activation_bytes(*activation_inputs(run));
  CHECK(full.per_layer == 4 * 8 * 64);  // the layer input, fp32 N h
  CHECK(full.layers == 2 * 4 * 8 * 64);
}
