// The walk over a step (src/step/walk*.cpp): which moments a step has and in which order they
// happen, what a moment holds, and where a rule's tensors live.
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"
#include "testutil.hpp"

#include <memest/activation.hpp>
#include <memest/config.hpp>
#include <memest/hf_config.hpp>
#include <memest/precision.hpp>
#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

using namespace memest;
using memest::test::tiny_llama;

namespace {

Step step_of(const RunSpec& run, detail::WalkOptions options = {}) {
  return detail::build_step(run, *activation_inputs(run), options);
}

// The names of a walk's moments, in the order the step runs them.
std::vector<std::string> in_time_order(const std::vector<MomentSpec>& walk) {
  std::vector<std::size_t> order(walk.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return time_rank(walk[a].id) < time_rank(walk[b].id);
  });
  std::vector<std::string> out;
  for (const std::size_t i : order) {
    const std::string name(moment_name(walk[i].id));
    if (out.empty() || out.back() != name) out.push_back(name);  // alternatives: one name
  }
  return out;
}

// A moment's tensors by name: their bytes in all at (b, s).
std::map<std::string, std::uint64_t> live(const Step& step, const MomentSpec& m, std::uint64_t b,
                                          std::uint64_t s) {
  const Basis x = basis_at(b, s);
  std::map<std::string, std::uint64_t> out;
  for (std::uint32_t i = m.begin; i < m.end; ++i) {
    const Entry& e = step.entries[i];
    const Tensor& t = step.tensors[e.tensor];
    if (t.exists_at(x)) out[std::string(t.name)] += t.bytes.at(x) * e.count;
  }
  return out;
}

const MomentSpec& first_of(const std::vector<MomentSpec>& walk, MomentKind kind) {
  const auto it = std::find_if(walk.begin(), walk.end(),
                               [&](const MomentSpec& m) { return m.id.kind == kind; });
  REQUIRE(it != walk.end());
  return *it;
}

// The moments of a walk that hold a tensor of this name.
std::vector<std::string> holding(const Step& step, const std::vector<MomentSpec>& walk,
                                 std::string_view name) {
  std::vector<std::string> out;
  for (const MomentSpec& m : walk) {
    for (std::uint32_t i = m.begin; i < m.end; ++i) {
      if (step.tensors[step.entries[i].tensor].name != name) continue;
      const std::string n(moment_name(m.id));
      if (out.empty() || out.back() != n) out.push_back(n);
      break;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the walk's moments happen in the order PyTorch runs a step", "[walk]") {
  // fp32 SGD: no grad copy and no master copy; eager attention has one alternative each.
  const Step step = step_of(tiny_llama("fp32", 2, 8));
  CHECK(in_time_order(step.steady) ==
        std::vector<std::string>{"forward_attention", "forward_end", "backward_start",
                                 "backward_mlp_last_layer", "backward_attention_last_layer",
                                 "backward_mlp_first_layer", "backward_attention_first_layer",
                                 "backward_end", "optimizer", "zero_grad"});
  // The walk itself lists forward_end first and the layers after backward_end.
  CHECK(moment_name(step.steady.front().id) == "forward_end");
}

TEST_CASE("the optimizer in backward and FSDP add their moments in step order", "[walk]") {
  RunSpec run = tiny_llama("bf16", 2, 8);
  run.training.optimizer_in_backward = true;
  run.parallel.data_parallel = 2;
  run.parallel.zero_stage = 3;
  run.parallel.fsdp_version = 2;
  const Step step = step_of(run);
  CHECK(in_time_order(step.steady) ==
        std::vector<std::string>{
            "forward_attention", "forward_end", "backward_start", "optimizer_step_in_backward_head",
            "backward_mlp_last_layer", "optimizer_step_in_backward_last_layer",
            "backward_attention_last_layer", "post_backward_last_layer", "backward_mlp_first_layer",
            "optimizer_step_in_backward_first_layer", "backward_attention_first_layer",
            "post_backward_first_layer", "backward_end", "optimizer_step_in_backward_embedding"});
}

TEST_CASE("forward_end and backward_start hold the loss's tensors, sized by hand", "[walk]") {
  // b = 2, s = 8: N = 16 tokens over a vocabulary of 100, bf16 logits.
  const Step step = step_of(tiny_llama("bf16", 2, 8));
  const auto fwd = live(step, first_of(step.steady, MomentKind::forward_end), 2, 8);
  CHECK(fwd.at("logits") == 2 * 16 * 100);
  CHECK(fwd.at("logits.float()") == 4 * 16 * 100);
  CHECK(fwd.at("padded labels (int64)") == 8 * 2 * 9);
  CHECK(fwd.at("log_softmax(logits.float()) (fp32 N x V)") == 4 * 16 * 100);
  CHECK(fwd.at("loss (0-d fp32)") == 4);
  // 2 x 64 x 100 embedding and lm_head, 2 layers of 4 x 64^2 + 3 x 64 x 128 + 2 x 64, a final
  // norm of 64: 95,040 parameters in bf16.
  CHECK(fwd.at("parameters") == 2 * 95'040);
  CHECK(fwd.at("input ids (int64)") == 8 * 16);
  const auto bwd = live(step, first_of(step.steady, MomentKind::backward_start), 2, 8);
  CHECK(bwd.at("gradient of the log-probs (fp32)") == 4 * 16 * 100);
  CHECK(bwd.at("gradient of the logits (fp32)") == 4 * 16 * 100);
  CHECK(bwd.count("logits") == 0);                      // freed after the loss
  CHECK(bwd.count("loss target (int64 labels)") == 0);  // released by NllLossBackward0
}

TEST_CASE("torchtune's chunked lm_head backward holds two weight gradients, sized by hand",
          "[walk]") {
  // b = 2, s = 8: N = 16 tokens, V = 100, h = 64, bf16; 4 chunks of 16 x 25 logits. Every chunk's
  // loss runs backward before any chunk's linear; at the second linear the weight's
  // AccumulateGrad buffer and that chunk's weight gradient (2 x 100 x 64 x 2 B), the logits
  // gradients of 3 chunks (3 x 16 x 25 x 2 B) and two chunks of the lm_head input's gradient
  // (2 x 16 x 16 x 2 B) are live, and none of the logits the loss saved.
  RunSpec run = tiny_llama("bf16", 2, 8);
  run.training.loss = Loss::chunked;
  run.training.loss_chunk = 4;
  run.training.compile = true;
  const Step step = step_of(run);
  std::vector<const MomentSpec*> at;
  for (const MomentSpec& m : step.steady)
    if (m.id.kind == MomentKind::backward_start) at.push_back(&m);
  REQUIRE(at.size() == 2);
  const auto start = live(step, *at[0], 2, 8);
  const auto head = live(step, *at[1], 2, 8);
  CHECK(start.at("each chunk's logits, kept by the compiled loss (all chunks: N x V)") ==
        2 * 16 * 100);
  CHECK(head.at("lm_head weight gradient: AccumulateGrad's buffer and this chunk's") ==
        2 * 2 * 100 * 64);
  CHECK(head.at("logits gradients of the chunks whose lm_head backward has not run") ==
        3 * 16 * 25 * 2);
  CHECK(head.at("gradients of the lm_head input: this chunk's and the last's") == 2 * 16 * 16 * 2);
  CHECK(head.count("each chunk's logits, kept by the compiled loss (all chunks: N x V)") == 0);
  CHECK(head.count("gradient of one chunk's logits (compiled loss)") == 0);
  CHECK(head.count("log-sum-exp of each row (fp32, compiled loss)") == 0);
  CHECK(head.at("lm_head input (final norm output)") == 2 * 16 * 64);
  // One chunk: a single linear, whose weight gradient goes straight to AccumulateGrad.
  run.training.loss_chunk = 1;
  const Step one = step_of(run);
  CHECK(std::count_if(one.steady.begin(), one.steady.end(), [](const MomentSpec& m) {
          return m.id.kind == MomentKind::backward_start;
        }) == 1);
}

TEST_CASE("a layer's backward holds the layers below it and not those above", "[walk]") {
  // Llama-2-style layer, fp32, b = 1, s = 8: the first layer's MLP backward holds no saved
  // layer below it; the last layer's (layer 1) holds layer 0 whole and itself.
  const Step step = step_of(tiny_llama("fp32", 1, 8));
  std::vector<const MomentSpec*> mlp;
  for (const MomentSpec& m : step.steady)
    if (m.id.kind == MomentKind::backward_mlp) mlp.push_back(&m);
  REQUIRE(mlp.size() == 2);
  REQUIRE(mlp[0]->id.at == LayerAt::last);
  const auto last = live(step, *mlp[0], 1, 8);
  const auto first = live(step, *mlp[1], 1, 8);
  // The softmax output of a layer: 4 B x 4 heads x 8 x 8 positions; the last layer's moment
  // holds two layers' (its own and layer 0's), the first layer's one.
  CHECK(last.at("softmax output (softmax(dtype=float32))") == 2 * 4 * 4 * 64);
  CHECK(first.at("softmax output (softmax(dtype=float32))") == 4 * 4 * 64);
}

TEST_CASE("a rule's tensor is in exactly the moments of its lifetime", "[walk][rules]") {
  SECTION("the output a training loop holds: every steady moment, the first step's from backward") {
    RunSpec run = tiny_llama("bf16", 2, 8);
    run.training.loop_keeps_output = true;
    run.training.grads_set_to_none = false;  // gradients kept: the first step has its own walk
    const Step step = step_of(run, {.first_step = true});
    REQUIRE(!step.first.empty());
    const std::string_view held = "logits of the model's output, held by the training loop";
    std::vector<std::string> all;
    for (const MomentSpec& m : step.steady) {
      const std::string n(moment_name(m.id));
      if (all.empty() || all.back() != n) all.push_back(n);
    }
    CHECK(holding(step, step.steady, held) == all);
    const std::vector<std::string> first = holding(step, step.first, held);
    CHECK(std::find(first.begin(), first.end(), "forward_end") == first.end());
    CHECK(std::find(first.begin(), first.end(), "forward_attention") == first.end());
    CHECK(std::find(first.begin(), first.end(), "backward_start") != first.end());
    CHECK(std::find(first.begin(), first.end(), "zero_grad") != first.end());
  }
  SECTION("LitGPT's logits: from the loss through every layer's backward") {
    RunSpec run = tiny_llama("bf16", 2, 8);
    run.training.loss = Loss::chunked_tokens;
    const Step step = step_of(run);
    CHECK(holding(step, step.steady, "logits (chunks kept by the training loop)") ==
          std::vector<std::string>{"forward_end", "backward_start", "backward_mlp_last_layer",
                                   "backward_attention_last_layer", "backward_mlp_first_layer",
                                   "backward_attention_first_layer"});
  }
}

TEST_CASE("ZeRO shares model states over the ranks, never a tensor in flight", "[walk]") {
  RunSpec run = tiny_llama("bf16", 2, 8);
  run.parallel.data_parallel = 4;
  run.parallel.zero_stage = 2;
  const Step step = step_of(run);
  bool saw_state = false, saw_flight = false;
  for (const Entry& e : step.entries) {
    const Tensor& t = step.tensors[e.tensor];
    if (t.part != Part::grads) continue;
    if (t.scope == Scope::state) {
      saw_state = saw_state || t.name == "gradients of one layer";
      CHECK(e.ranks == 4);
    } else {
      saw_flight = saw_flight || t.name == "gradient of the down projection weight";
      CHECK(e.ranks == 1);
    }
  }
  CHECK(saw_state);
  CHECK(saw_flight);
}

// Megatron-LM's all-to-all dispatcher: the combine's all-to-all in backward sends the gradients
// of this rank's N x k routed copies and receives those of the R rows its experts computed. A
// small Mixtral (h 64, 8 experts, top 2) at b 2, s 16: N = 32, R = N x k = 64 (balanced).
TEST_CASE("the all-to-all buffers are live in the MoE layer's backward only", "[walk]") {
  RunOptions o;
  o.architecture = Setting<std::string>{
      R"({"model_type":"mixtral","vocab_size":1000,"hidden_size":64,"num_hidden_layers":2,)"
      R"("num_attention_heads":4,"num_key_value_heads":4,"intermediate_size":32,)"
      R"("num_local_experts":8,"num_experts_per_tok":2})",
      "--architecture"};
  o.precision = Setting<std::string>{"bf16", "--precision"};
  o.batch = Setting<std::string>{"2", "--batch"};
  o.seq = Setting<std::string>{"16", "--seq"};
  o.moe_dispatcher = Setting<std::string>{"alltoall", "--moe-dispatcher"};
  const RunSpec run = resolve(o);
  const Step step = step_of(run);
  const std::string send = "MoE all-to-all: gradients of the routed tokens (send buffer)";
  const std::string receive = "MoE all-to-all: gradients of the rows received (receive buffer)";
  const auto where = holding(step, step.steady, send);
  REQUIRE_FALSE(where.empty());
  for (const auto& name : where) CHECK(name.starts_with("backward_mlp"));
  CHECK(holding(step, step.steady, receive) == where);
  for (const MomentSpec& m : step.steady) {
    const auto l = live(step, m, 2, 16);
    if (!l.contains(send)) continue;
    CHECK(l.at(send) == 2 * 32 * 2 * 64);  // N x k rows of h, bf16
    CHECK(l.at(receive) == 2 * 64 * 64);   // R = 64 rows of h
  }
}

TEST_CASE("the walk's constants of no bytes are one tensor, entered nowhere", "[walk]") {
  // (Temporaries sized by a shape with a zero dimension are tensors of their own.)
  // bf16 without autocast: no weight copies, no accumulation buffer, no DDP buckets, no master
  // gradients; SGD without momentum: no optimizer states (a tensor of its own, entered empty).
  const Step step = step_of(tiny_llama("bf16", 2, 8));
  std::vector<std::uint32_t> empty;
  for (std::uint32_t i = 0; i < step.tensors.size(); ++i) {
    const bool optimizer = i == step.states_tensor ||
                           std::find(step.step_temporaries.begin(), step.step_temporaries.end(),
                                     i) != step.step_temporaries.end();
    // A constant (no shape): what Walker::constant and in_flight create.
    const bool constant = step.tensors[i].shape.rank == 0;
    if (step.tensors[i].empty() && constant && !optimizer) empty.push_back(i);
  }
  CHECK(empty.size() == 1);
  for (const Entry& e : step.entries) {
    const bool kept = e.tensor == step.states_tensor ||
                      std::find(step.step_temporaries.begin(), step.step_temporaries.end(),
                                e.tensor) != step.step_temporaries.end();
    CHECK((kept || !step.tensors[e.tensor].empty()));
  }
}

TEST_CASE("each tensor's bytes past the inline array, and an absent tensor as 0", "[walk]") {
  Step step;
  for (std::uint64_t i = 0; i < 200; ++i)
    detail::add_constant(step, "c", Part::other, Scope::state, i + 1);
  const std::uint32_t one = detail::add_tensor(step, "batch 1 only", Part::other, Scope::transient,
                                               Slot::none, 2, shape({sym::N}), Batch::one);
  const Basis x = basis_at(4, 8);  // b = 4: the batch-1 tensor does not exist
  const detail::TensorBytes bytes(step, x);
  CHECK(bytes[0] == 1);
  CHECK(bytes[150] == 151);
  CHECK(bytes[199] == 200);
  CHECK_FALSE(bytes.exists(one));
  std::array<std::uint64_t, kPartCount> parts{};
  CHECK(bytes.add_entry({150, 1, 3}, parts) == 3 * 151);
  CHECK(bytes.add_entry({one, 1, 5}, parts) == 0);
  CHECK(parts[static_cast<std::size_t>(Part::other)] == 3 * 151);
  const detail::TensorBytes at_one(step, basis_at(1, 8));
  CHECK(at_one[one] == 2 * 8);
}

TEST_CASE("the optimizer states are the step's one tensor of their part", "[walk]") {
  // The first step's peak is read from the steady moments less their optimizer states, taken
  // as each moment's optimizer_state part (src/step/plan.cpp, moments_at): no other tensor may
  // have that part, in any stack that adds tensors of its own.
  std::vector<RunSpec> runs;
  RunSpec run = tiny_llama("mixed-bf16", 2, 8);
  run.optimizer.kind = OptimizerKind::adamw;
  runs.push_back(run);
  RunSpec in_backward = run;
  in_backward.training.optimizer_in_backward = true;
  runs.push_back(in_backward);
  RunSpec fsdp = run;
  fsdp.parallel.data_parallel = 2;
  fsdp.parallel.zero_stage = 3;
  fsdp.parallel.fsdp_version = 2;
  runs.push_back(fsdp);
  RunSpec paged = run;
  paged.optimizer.kind = OptimizerKind::adam8bit;
  paged.optimizer.paged = true;
  runs.push_back(paged);
  RunSpec offload = run;
  offload.training.offload_activations = true;
  runs.push_back(offload);
  for (const RunSpec& r : runs) {
    const Step step = step_of(r, {.first_step = true, .timeline = true});
    std::vector<std::uint32_t> states;
    for (std::uint32_t i = 0; i < step.tensors.size(); ++i) {
      if (step.tensors[i].part == Part::optimizer_state) states.push_back(i);
    }
    CHECK(states == std::vector<std::uint32_t>{step.states_tensor});
  }
}

TEST_CASE("a step built into a used one is the step built afresh", "[walk]") {
  // build_step_into keeps the vectors' storage of the step it is given (estimate_step's
  // per-thread step): nothing of the step before may be left in any member.
  RunSpec before = tiny_llama("mixed-bf16", 4, 64);  // gradients kept: a first walk of its own
  before.training.grads_set_to_none = false;
  before.optimizer.kind = OptimizerKind::adamw;
  Step step = step_of(before, {.first_step = true, .timeline = true});
  REQUIRE_FALSE(step.first.empty());
  const RunSpec after = tiny_llama("bf16", 1, 8);
  detail::build_step_into(step, after, *activation_inputs(after));
  const Step fresh = step_of(after);
  REQUIRE(step.tensors.size() == fresh.tensors.size());
  for (std::size_t i = 0; i < fresh.tensors.size(); ++i) {
    CHECK(step.tensors[i].name == fresh.tensors[i].name);
    CHECK(step.tensors[i].bytes.c == fresh.tensors[i].bytes.c);
  }
  const auto same_entries = [](const std::vector<Entry>& a, const std::vector<Entry>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const Entry& x, const Entry& y) {
      return x.tensor == y.tensor && x.ranks == y.ranks && x.count == y.count;
    });
  };
  CHECK(same_entries(step.entries, fresh.entries));
  CHECK(same_entries(step.saved, fresh.saved));
  const auto same_walk = [](const std::vector<MomentSpec>& a, const std::vector<MomentSpec>& b) {
    return std::equal(
        a.begin(), a.end(), b.begin(), b.end(), [](const MomentSpec& x, const MomentSpec& y) {
          return x.id == y.id && x.begin == y.begin && x.end == y.end && x.layer == y.layer;
        });
  };
  CHECK(same_walk(step.steady, fresh.steady));
  CHECK(step.first.empty());
  CHECK(step.timeline.empty());
  CHECK(step.step_temporaries == fresh.step_temporaries);
  CHECK(step.states_tensor == fresh.states_tensor);
  CHECK(step.state_bytes == fresh.state_bytes);
  CHECK(step.step_counter_bytes == fresh.step_counter_bytes);
  CHECK(step.walk_mlp == fresh.walk_mlp);
}
