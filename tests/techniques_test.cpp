// The techniques of docs/techniques.md, each checked against a figure derived here from the
// model's shapes (meta-llama/Llama-3.2-1B: h 2048, I 8192, 32 heads of 64, 8 kv heads, 16
// layers, vocab 128256, tied embeddings), not read back from the code under test.
#include "testutil.hpp"

#include <memest/estimate.hpp>
#include <memest/peak.hpp>

#include <catch2/catch.hpp>

#include <algorithm>

using namespace memest;
using memest::test::moment;
using memest::test::run_cli;
using memest::test::run_of;

namespace {}  // namespace

// Llama-3.2-1B's shapes; each test case that uses them opens the namespace in its own body, so the
// one-letter names stay out of the unity file the tests compile in.
namespace llama_1b {
constexpr std::uint64_t h = 2048, I = 8192, a = 32, kv = 8, d = 64, L = 16, V = 128256;
}  // namespace llama_1b

namespace {

RunSpec llama1b(std::uint64_t b, std::uint64_t s) {
  RunSpec r = run_of("llama-3.2-1b", "bf16", b, s);
  r.training.attention = Attention::flash;
  return r;
}

std::uint64_t part(const Moment& m, Part p) { return m.parts[static_cast<std::size_t>(p)]; }

}  // namespace

TEST_CASE("optimizer in backward: gradients one tensor at a time, plus the tied lm_head's",
          "[techniques]") {
  using namespace llama_1b;
  RunSpec r = llama1b(2, 1024);
  r.training.recompute = Recompute::full;
  const Estimate before = estimate(r);
  r.training.optimizer_in_backward = true;
  const Estimate after = estimate(r);
  std::uint64_t most = 0;
  for (const Moment& m : after.peak->moments) {
    REQUIRE(m.phase != "optimizer");  // every parameter was stepped in backward
    most = std::max(most, part(m, Part::grads));
  }
  // The largest layer tensor is an MLP weight (I x h); the tied lm_head's gradient (V x h)
  // waits in autograd's buffer for the embedding's, which is then stepped alone.
  REQUIRE(most == 2 * (V * h + I * h));
  // Without it the optimizer phase holds every gradient: 2 B per parameter.
  const std::uint64_t params = V * h + L * (2 * h * a * d + 2 * h * kv * d + 3 * h * I + 2 * h) + h;
  REQUIRE(part(moment(*before.peak, "optimizer"), Part::grads) == 2 * params);
}

TEST_CASE("activation offloading: the device keeps the stash, the lm_head input and the loss's",
          "[techniques]") {
  using namespace llama_1b;
  const std::uint64_t b = 2, s = 1024, N = b * s;
  RunSpec r = llama1b(b, s);
  r.training.recompute = Recompute::full;
  r.training.offload_activations = true;
  const Estimate e = estimate(r);
  // torchtune OffloadActivations: the 5 most recent offloaded tensors (5 layer inputs, bf16),
  // the output linear's input (opted out) and the loss's log-probs (computed outside).
  REQUIRE(part(moment(*e.peak, "backward_start"), Part::activations) ==
          5 * N * h * 2 + N * h * 2 + N * V * 4);
  // In backward only the current layer's input comes back: the inputs of the layers below and
  // the rotary cos/sin stay on the host (SDPA gets no materialised causal mask).
  r.training.offload_activations = false;
  const Estimate kept = estimate(r);
  const Moment& with = moment(*e.peak, "backward_mlp_last_layer");
  const Moment& without = moment(*kept.peak, "backward_mlp_last_layer");
  REQUIRE(part(without, Part::activations) - part(with, Part::activations) ==
          (L - 1) * N * h * 2 + 2 * s * d * 2);
}

TEST_CASE("paged optimizer: states of large tensors in unified memory, outside the peak",
          "[techniques]") {
  using namespace llama_1b;
  RunSpec r = llama1b(1, 512);
  r.optimizer.kind = OptimizerKind::adam8bit;
  const Estimate device = estimate(r);
  r.optimizer.paged = true;
  const Estimate paged = estimate(r);
  // bitsandbytes pages state1 and state2 (1 B each) of tensors of 1e5 elements or more: every
  // matrix; the norms (2048 elements) stay, with the absmax and qmap tensors.
  const std::uint64_t large = V * h + L * (2 * h * a * d + 2 * h * kv * d + 3 * h * I);
  REQUIRE(paged.unified_bytes == 2 * large);
  REQUIRE(paged.at("optimizer_states_paged").bytes == 2 * large);
  REQUIRE(device.total_bytes - paged.total_bytes == 2 * large);
  REQUIRE(device.peak->bytes - paged.peak->bytes == 2 * large);
  REQUIRE(device.unified_bytes == 0);
}

TEST_CASE("per-op checkpointing keeps the input and every other mm's output", "[techniques]") {
  using namespace llama_1b;
  const std::uint64_t b = 2, s = 1024, N = b * s;
  RunSpec r = llama1b(b, s);
  r.training.recompute = Recompute::op;
  const Estimate e = estimate(r);
  // torchtitan's policy: wq (saved), wk, wv (saved), wo, w1 (saved), w3, w2 (saved), and the
  // flash kernel's output and log-sum-exp; the layer input kept by the checkpoint.
  const std::uint64_t per_layer = 2 * N * (h + a * d + kv * d + I + h + a * d) + 4 * b * a * s;
  REQUIRE(e.activations->per_layer == per_layer);
  REQUIRE(e.activations->layers == L * per_layer);
}

TEST_CASE("torch.compile drops the pointwise results Inductor's partitioner recomputes",
          "[techniques]") {
  using namespace llama_1b;
  const std::uint64_t N = 2 * 1024;
  RunSpec r = llama1b(2, 1024);
  const Estimate eager = estimate(r);
  r.training.compile = true;
  const Estimate compiled = estimate(r);
  // Per layer: two RMSNorm inputs kept in bf16 instead of fp32, their x * rstd outputs and
  // act(gate) recomputed; the norm outputs and gate x up (read by matmuls) stay.
  REQUIRE(eager.activations->per_layer - compiled.activations->per_layer ==
          2 * N * h * 2 + 2 * N * h * 2 + N * I * 2);
}

TEST_CASE("a compiled chunked loss keeps the bf16 chunks and a log-sum-exp per row",
          "[techniques]") {
  using namespace llama_1b;
  const std::uint64_t N = 2 * 1024;
  RunSpec r = llama1b(2, 1024);
  r.training.loss = Loss::chunked;
  r.training.loss_chunk = 8;
  r.training.compile = true;
  const Estimate compiled = estimate(r);
  r.training.compile = false;
  const Estimate eager = estimate(r);
  // torchtune compiles compute_cross_entropy (the upcast and the cross-entropy): instead of each
  // chunk's fp32 log-softmax (N x V x 4 in all) backward keeps the bf16 chunks (N x V x 2) and
  // one fp32 log-sum-exp per row (N x 4).
  REQUIRE(eager.activations->head - compiled.activations->head == N * V * 4 - (N * V * 2 + N * 4));
}

TEST_CASE("techniques refuse what they cannot do, naming the flag", "[techniques][cli]") {
  auto r = run_cli({"--params", "7B", "--optimizer-in-backward", "--grad-accum", "4"});
  REQUIRE(r.code == 2);
  REQUIRE(r.err ==
          "memest: error: --optimizer-in-backward: the step runs in every backward pass, so "
          "gradients cannot be accumulated (expected --grad-accum 1, got 4)\n");
  r = run_cli({"--params", "7B", "--optimizer", "sgd", "--paged-optimizer"});
  REQUIRE(r.code == 2);
  REQUIRE(r.err ==
          "memest: error: --paged-optimizer: bitsandbytes pages adam, adamw, adam8bit and lion, "
          "got optimizer \"sgd\"\n");
  r = run_cli({"--params", "7B", "--offload", "optimizer,disk"});
  REQUIRE(r.code == 2);
  REQUIRE(r.err ==
          "memest: error: --offload: unknown offload \"disk\" (expected none, or a "
          "comma-separated list of: optimizer, params, activations)\n");
  r = run_cli({"--params", "7B", "--precision", "mixed", "--optimizer-in-backward"});
  REQUIRE(r.code == 2);
}

// (A name with a semicolon is two names to catch_discover_tests: this test did not run under
// ctest until its name lost one, and its list of moments named one that does not exist.)
TEST_CASE(
    "transformers before 4.45 return fp32 logits, and a loop that keeps its output holds them",
    "[techniques]") {
  using namespace llama_1b;
  // LlamaForCausalLM.forward before 4.45: `logits = logits.float()` is the model's output and
  // the loss takes `logits[..., :-1, :].contiguous()`: at the loss an fp32 output and an fp32
  // shifted copy where the recent loss has the bf16 output and its fp32 upcast (+2 N V bytes).
  const std::uint64_t N = 2 * 1024;
  const auto estimate_with = [](Loss loss, bool keep) {
    RunSpec r = llama1b(2, 1024);
    r.training.loss = loss;
    r.training.loop_keeps_output = keep;
    return estimate(r);
  };
  const Estimate hf = estimate_with(Loss::hf, false);
  const Estimate upcast = estimate_with(Loss::hf_upcast, false);
  const Estimate kept = estimate_with(Loss::hf_upcast, true);
  const auto at = [](const Estimate& e, std::string_view name) { return moment(*e.peak, name); };
  const auto other = [&](const Estimate& e, std::string_view name) {
    return part(at(e, name), Part::other);
  };
  REQUIRE(other(upcast, "forward_end") == other(hf, "forward_end") + 2 * N * V);
  // The Trainer drops the output before backward: backward starts as with the recent loss.
  REQUIRE(at(upcast, "backward_start").bytes == at(hf, "backward_start").bytes);
  // A loop that writes `output = model(...)` holds the fp32 logits from there to the next
  // forward's return: through backward and the optimizer, and (the previous step's) through
  // the next forward, at the loss beside the new ones.
  for (const char* name :
       {"forward_end", "forward_attention", "backward_start", "backward_end", "optimizer"}) {
    INFO(name);
    REQUIRE(at(kept, name).bytes == at(upcast, name).bytes + 4 * N * V);
  }
  // The first step holds its own output from the loss on (its peak, at the optimizer, grows
  // by one fp32 N x V).
  REQUIRE(kept.peak->first_step_moment == upcast.peak->first_step_moment);
  REQUIRE(kept.peak->first_step_bytes == upcast.peak->first_step_bytes + 4 * N * V);
}
