#include "testutil.hpp"

#include <memest/check.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>
#include <memest/peak.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <array>
#include <string>

using namespace memest;
using memest::test::moment;
using memest::test::run_of;

namespace {

// A factor's value at (b, s), read from its meaning, not from the Poly the core evaluates.
std::uint64_t factor_value(const Sym& f, std::uint64_t b, std::uint64_t s) {
  const std::string name = f.name;
  if (name == "b") return b;
  if (name == "s") return s;
  if (name == "N") return b * s;
  if (name == "s^2") return s * s;
  if (name == "(s+1)") return s + 1;
  if (name == "ceil32(s)") return (s + 31) / 32 * 32;
  return f.value;
}

std::uint64_t shape_bytes(const LiveTensor& t, std::uint64_t b, std::uint64_t s) {
  std::uint64_t n = t.width;
  for (std::uint8_t i = 0; i < t.shape.rank; ++i) n *= factor_value(t.shape.factors[i], b, s);
  return n;
}

}  // namespace

TEST_CASE("every byte at the peak belongs to a named tensor sized by its shape", "[peak]") {
  auto policy = GENERATE(as<std::string>{}, "fp32", "amp-bf16", "bf16", "mixed-bf16");
  auto recompute = GENERATE(Recompute::none, Recompute::selective, Recompute::full);
  auto attention = GENERATE(Attention::eager, Attention::flash);
  auto b = GENERATE(1ULL, 2ULL);
  auto r = run_of("llama-3.2-1b", policy, b, 1000);
  r.training.recompute = recompute;
  r.training.attention = attention;
  const auto e = estimate(r);
  REQUIRE(e.peak);
  std::array<std::uint64_t, kPartCount> by_part{};
  for (const auto& t : e.peak->live) {
    CAPTURE(t.name, t.count);
    REQUIRE_FALSE(t.name.empty());
    REQUIRE(t.bytes_each == shape_bytes(t, b, 1000));
    REQUIRE(t.bytes == t.count * t.bytes_each);
    by_part[static_cast<std::size_t>(t.part)] += t.bytes;
  }
  const auto& m = e.peak->peak_moment();
  for (std::size_t i = 0; i < kPartCount; ++i) {
    CAPTURE(part_name(static_cast<Part>(i)));
    REQUIRE(by_part[i] == m.parts[i]);
  }
  REQUIRE(e.peak->bytes == m.bytes);
}

TEST_CASE("the temporaries at backward_start are the loss's named buffers", "[peak]") {
  // Derivation §4.2: grad_logprobs and grad_logits (fp32 N x V each), the loss, the seed.
  auto r = run_of("gpt2", "fp32", 4, 512);
  r.training.device = Device::cpu;
  const auto e = estimate(r);
  REQUIRE(e.peak->peak_moment().name == "backward_start");
  const std::uint64_t N = 4 * 512, V = 50257;
  std::uint64_t other = 0;
  for (const auto& t : e.peak->live) {
    if (t.part != Part::other) continue;
    CAPTURE(t.name);
    other += t.bytes;
    if (t.name.find("gradient of the") == 0) REQUIRE(t.bytes == 4 * N * V);
  }
  REQUIRE(other == 8 * N * V + 8);
}

TEST_CASE("backward_start: saved activations plus two fp32 logits-sized buffers", "[peak]") {
  // Derivation §4.2: B + (A - target - 4) + 2 x 4 N V + 8; fp32 has no weight copies.
  auto r = run_of("gpt2", "fp32", 4, 512);
  r.training.device = Device::cpu;
  const auto e = estimate(r);
  const auto& m = moment(*e.peak, "backward_start");
  const std::uint64_t N = 4 * 512, V = 50257;
  const auto& a = *e.activations;
  const std::uint64_t baseline = *e.at("params").bytes + *e.at("optimizer_states").bytes +
                                 *e.at("optimizer_step").bytes + 8 * N;
  REQUIRE(m.bytes == baseline + (a.total - a.target - 4) + 8 * N * V + 8);
  REQUIRE(e.peak->phase == "backward");
}

TEST_CASE("first step vs steady state", "[peak]") {
  auto r = run_of("llama-3.2-1b", "fp32", 8, 1024);  // peaks in backward
  REQUIRE(estimate(r).peak->phase == "backward");
  SECTION("set_to_none: the first step has no optimizer state before its optimizer phase") {
    const auto e = estimate(r);
    REQUIRE(e.peak->first_step_bytes < e.peak->bytes);
    REQUIRE(e.peak->bytes - e.peak->first_step_bytes <= *e.at("optimizer_states").bytes);
  }
  SECTION("--zero-grad zero: gradients stay between steps, the steady state holds them") {
    const auto none = estimate(r).peak->bytes;
    r.training.grads_set_to_none = false;
    const auto e = estimate(r);
    REQUIRE(e.peak->bytes > none);
    REQUIRE(moment(*e.peak, "forward_end").parts[static_cast<std::size_t>(Part::grads)] ==
            *e.at("grads").bytes);
  }
  SECTION("grad accumulation: micro-batches after the first run with gradients live") {
    const auto one = estimate(r).peak->bytes;
    r.training.grad_accum = 4;
    REQUIRE(estimate(r).peak->bytes > one);
  }
}

TEST_CASE("flash attention and recompute lower the peak of a long sequence", "[peak]") {
  auto r = run_of("llama-2-7b", "bf16", 1, 4096);
  const auto eager = estimate(r).peak->bytes;
  r.training.attention = Attention::flash;
  const auto flash = estimate(r).peak->bytes;
  const auto flash_acts = *estimate(r).at("activations").bytes;
  r.training.recompute = Recompute::full;
  const auto e = estimate(r);
  REQUIRE(flash < eager);
  REQUIRE(e.peak->bytes <= flash);  // now the optimizer step's foreach temporaries decide
  REQUIRE(*e.at("activations").bytes < flash_acts);
}

TEST_CASE("the CUDA caching allocator rounds blocks to 512 bytes", "[peak]") {
  REQUIRE(caching_round_size(1) == 512);
  REQUIRE(caching_round_size(512) == 512);
  REQUIRE(caching_round_size(513) == 1024);
  REQUIRE(caching_round_size(3'000'000) == 3'000'320);
  auto r = run_of("gpt2", "amp-bf16", 8, 1024);
  const auto plain = estimate(r);
  REQUIRE_FALSE(plain.peak->reserved_bytes);
  r.training.allocator = Allocator::cuda;
  r.training.context_reserve = 500ULL << 20;
  const auto e = estimate(r);
  REQUIRE(e.peak->bytes == plain.peak->bytes);  // the requested bytes do not change
  REQUIRE(*e.peak->allocated_bytes >= e.peak->bytes);
  REQUIRE(*e.peak->reserved_bytes >= *e.peak->allocated_bytes);
  REQUIRE(e.peak->needed == *e.peak->reserved_bytes + (500ULL << 20));
  REQUIRE(bytes_needed(e) == e.peak->needed);
}

TEST_CASE("bytes_needed(run) is the estimate's peak, without building it", "[peak]") {
  auto preset = GENERATE(as<std::string>{}, "llama-2-7b", "gpt2", "mixtral-8x7b", "phi-2");
  auto policy = GENERATE(as<std::string>{}, "fp32", "amp-bf16", "mixed-bf16");
  auto kind = GENERATE(OptimizerKind::sgd, OptimizerKind::adamw, OptimizerKind::rmsprop,
                       OptimizerKind::adafactor, OptimizerKind::adam8bit);
  auto r = run_of(preset, policy, 2, 1024);
  r.optimizer.kind = kind;
  REQUIRE(bytes_needed(r) == bytes_needed(estimate(r)));
  r.training.device = Device::cpu;
  r.training.recompute = Recompute::full;
  r.training.allocator = Allocator::cuda;
  REQUIRE(bytes_needed(r) == bytes_needed(estimate(r)));
  r.training.seq_len = 0;  // no activations: the sum of the device categories
  std::uint64_t device = 0;
  for (const auto& c : estimate(r).categories) {
    if (c.on_device && c.bytes) device += *c.bytes;
  }
  REQUIRE(bytes_needed(r) == device);
}

TEST_CASE("a bare count gets a peak with exact static bytes", "[peak]") {
  RunSpec r;
  r.model = model_from_count(7'000'000'000);
  r.precision = precision_preset("mixed-bf16");
  r.training.micro_batch = 1;
  r.training.seq_len = 4096;
  r.training.attention = Attention::flash;
  const auto e = estimate(r);
  const auto& m = e.peak->peak_moment();
  REQUIRE(m.parts[static_cast<std::size_t>(Part::params)] == 14'000'000'000ULL);
  REQUIRE(m.parts[static_cast<std::size_t>(Part::master_params)] == 28'000'000'000ULL);
  REQUIRE(bytes_needed(r) == bytes_needed(e));
}

TEST_CASE("a peak plan gives the same bytes as the full walk at every size", "[peak]") {
  auto preset = GENERATE("llama-2-7b", "gpt2", "mixtral-8x7b", "qwen2.5-0.5b");
  auto policy = GENERATE("fp32", "amp-bf16", "mixed-bf16", "bf16");
  auto r = run_of(preset, policy, 1, 128);
  r.training.attention = GENERATE(Attention::eager, Attention::flash);
  const PeakPlan plan(r, *activation_inputs(r, Notes::skipped));
  for (std::uint64_t b : {1ULL, 3ULL, 8ULL}) {
    for (std::uint64_t s : {64ULL, 1000ULL, 4096ULL}) {
      CAPTURE(preset, policy, b, s);
      r.training.micro_batch = b;
      r.training.seq_len = s;
      REQUIRE(plan.needed(b, s) == bytes_needed(r));
    }
  }
}

TEST_CASE("ZeRO lowers the peak stage by stage, and the live tensors still sum",
          "[peak][parallel]") {
  auto r = run_of("llama-2-7b", "mixed-bf16", 1, 2048);
  r.training.attention = Attention::flash;
  r.parallel.data_parallel = 8;
  std::uint64_t previous = UINT64_MAX;
  for (unsigned stage = 0; stage <= 3; ++stage) {
    r.parallel.zero_stage = stage;
    const auto e = estimate(r);
    CAPTURE(stage, e.peak->bytes);
    REQUIRE(e.peak->bytes < previous);
    previous = e.peak->bytes;
    std::uint64_t live = 0;
    for (const auto& t : e.peak->live) live += t.bytes;
    REQUIRE(live == e.peak->bytes);
    // Sharded states: each rank holds an eighth of the master weights and optimizer states.
    if (stage >= 1) {
      const auto& m = e.peak->peak_moment();
      REQUIRE(m.parts[static_cast<std::size_t>(Part::optimizer_state)] <=
              *estimate(run_of("llama-2-7b", "mixed-bf16", 1, 2048)).at("optimizer_states").bytes /
                      8 +
                  1164);
    }
  }
}

TEST_CASE("optimizer offload keeps master weights and states off the device", "[peak][parallel]") {
  auto r = run_of("llama-2-7b", "mixed-bf16", 1, 1024);
  const auto on_device = estimate(r);
  r.parallel.offload_optimizer = true;
  const auto offloaded = estimate(r);
  REQUIRE_FALSE(offloaded.at("optimizer_states").on_device);
  REQUIRE_FALSE(offloaded.at("master_weights").on_device);
  // The device total loses exactly the master weights and the states: 12 B per parameter.
  REQUIRE(on_device.total_bytes - offloaded.total_bytes == 12ULL * 6'738'415'616ULL);
  for (const auto& m : offloaded.peak->moments) {
    CAPTURE(m.name);
    REQUIRE(m.parts[static_cast<std::size_t>(Part::optimizer_state)] == 0);
    REQUIRE(m.parts[static_cast<std::size_t>(Part::master_params)] == 0);
    REQUIRE(m.parts[static_cast<std::size_t>(Part::master_grads)] == 0);
  }
  REQUIRE(offloaded.peak->bytes < on_device.peak->bytes);
}

TEST_CASE("the optimizer implementation decides the step's temporaries", "[peak]") {
  // foreach Adam holds a copy of every exp_avg_sq (torch._foreach_sqrt); single-tensor Adam two
  // tensors of the largest parameter; fused none.
  auto r = run_of("llama-2-7b", "mixed-bf16", 1, 4096);
  r.training.attention = Attention::flash;
  auto peak_with = [&](OptimizerImpl impl) {
    r.optimizer.impl = impl;
    return estimate(r).peak->bytes;
  };
  const auto foreach = peak_with(OptimizerImpl::foreach);
  const auto single = peak_with(OptimizerImpl::single);
  const auto fused = peak_with(OptimizerImpl::fused);
  REQUIRE(fused < single);
  REQUIRE(single < foreach);
  // The foreach copy is one fp32 tensor per trainable parameter (4 B x 6,738,415,616) where the
  // single-tensor path holds two of the largest (the 32000 x 4096 embedding); other live bytes
  // at the two moments differ by less than 1 MiB.
  const std::uint64_t expected = 4ULL * 6'738'415'616ULL - 2ULL * 4 * 32000 * 4096;
  REQUIRE(foreach - single > expected - (1ULL << 20));
  REQUIRE(foreach - single < expected + (1ULL << 20));
}

namespace {
// Every optimizer and implementation patched into one plan, against a plan walked for it and the
// whole estimate (two test cases, one per allocator, so that ctest runs them side by side).
void check_patched_optimizers(Allocator allocator, RunSpec r) {
  const std::string preset = r.model.name;
  r.training.allocator = allocator;
  r.parallel.data_parallel = GENERATE(1ULL, 8ULL);
  r.parallel.zero_stage = r.parallel.data_parallel > 1 ? 2 : 0;
  const PeakPlan base(r, *activation_inputs(r, Notes::skipped));
  for (auto kind : {OptimizerKind::sgd, OptimizerKind::adamw, OptimizerKind::rmsprop,
                    OptimizerKind::adafactor, OptimizerKind::adam8bit, OptimizerKind::lion}) {
    for (auto impl : {OptimizerImpl::foreach, OptimizerImpl::single, OptimizerImpl::fused}) {
      OptimizerSpec o;
      o.kind = kind;
      o.impl = impl;
      RunSpec other = r;
      other.optimizer = o;
      const PeakPlan walked(other, *activation_inputs(other, Notes::skipped));
      const PeakPlan patched = base.with_optimizer(o);
      for (std::uint64_t b : {1ULL, 4ULL}) {
        CAPTURE(preset, r.precision.name, static_cast<int>(kind), static_cast<int>(impl), b);
        REQUIRE(patched.needed(b, 512) == walked.needed(b, 512));
        if (b == 1) continue;  // the whole estimate once per combination: the suite's time
        other.training.micro_batch = b;
        REQUIRE(patched.needed(b, 512) == estimate(other).peak->needed);
      }
    }
  }
}
}  // namespace

TEST_CASE("a plan for another optimizer equals a plan walked for it", "[peak]") {
  auto preset = GENERATE("llama-2-7b", "gpt2", "mixtral-8x7b");
  auto policy = GENERATE("fp32", "amp-bf16", "mixed-bf16");
  check_patched_optimizers(Allocator::none, run_of(preset, policy, 2, 512));
}

TEST_CASE("a plan for another optimizer equals a plan walked for it, allocator replayed",
          "[peak]") {
  // The replay walks every tensor's allocation, so this case takes one dense model and Mixtral
  // cut to four layers (the same tensors per layer: experts, router), and the two policies that
  // differ in what the step allocates (ASan time; the unreplayed case above takes all nine).
  auto policy = GENERATE("fp32", "mixed-bf16");
  auto r = run_of("gpt2", policy, 2, 512);
  if (GENERATE(false, true)) {
    auto config = nlohmann::json::parse(
        memest::test::read_file(memest::test::data_path("data/models/mixtral-8x7b.json")));
    config["num_hidden_layers"] = 4;
    r.model = parse_hf_config(config.dump(), "mixtral-8x7b, 4 layers");
  }
  check_patched_optimizers(Allocator::cuda, r);
}

TEST_CASE("an encoder-decoder's grad copy walks both stacks in order", "[peak]") {
  // t5-small: block 0's relative attention bias sits inside the encoder's layer list and the
  // decoder is a second list; the copy's prefix never passes the trainable parameters.
  auto r = run_of("t5-small", "mixed-bf16", 2, 100);
  const auto e = estimate(r);
  const auto& m = moment(*e.peak, "grad_copy");
  const std::uint64_t T = e.trainable;
  const std::uint64_t master_grads = m.parts[static_cast<std::size_t>(Part::master_grads)];
  const std::uint64_t grads = m.parts[static_cast<std::size_t>(Part::grads)];
  REQUIRE(master_grads <= 4 * T);
  REQUIRE(grads <= 2 * T);
  // The copy of the last tensor: all master grads but nothing left of the bf16 ones but it.
  REQUIRE(master_grads + grads >= 4 * T);
}

TEST_CASE("the timeline is the walk at every layer, in step order", "[peak][timeline]") {
  auto preset = GENERATE("llama-2-7b", "gpt2", "mixtral-8x7b", "qwen2.5-0.5b");
  auto policy = GENERATE("fp32", "amp-bf16", "mixed-bf16", "bf16");
  auto r = run_of(preset, policy, 2, 512);
  r.training.attention = GENERATE(Attention::eager, Attention::flash);
  r.training.recompute = GENERATE(Recompute::none, Recompute::full);
  r.parallel.data_parallel = 4;
  r.parallel.zero_stage = GENERATE(0U, 3U);
  const auto e = estimate(r, {.timeline = true});
  const Peak& pk = *e.peak;
  const auto& tl = pk.timeline;
  const auto L = static_cast<std::int32_t>(r.model.arch->num_layers);
  CAPTURE(preset, policy, r.training.attention, r.training.recompute, r.parallel.zero_stage);
  REQUIRE(estimate(r).peak->timeline.empty());  // only when asked for
  // Its largest moment is the peak the walk found at the first and last layers.
  REQUIRE(tl[pk.timeline_peak].bytes == pk.bytes);
  std::int32_t forward = 0, mlp = 0, attention = 0;
  for (const Moment& m : tl) {
    std::uint64_t sum = 0;
    for (auto p : m.parts) sum += p;
    REQUIRE(sum == m.bytes);
    REQUIRE(m.bytes <= pk.bytes);
    if (m.name == "forward_attention") REQUIRE(m.layer == forward++);
    if (m.name == "backward_mlp") REQUIRE(m.layer == L - 1 - mlp++);
    if (m.name == "backward_attention") REQUIRE(m.layer == L - 1 - attention++);
    // At the last and the first layer, the in-layer moments are the walk's own.
    const auto same = [&](std::string_view walk_name) {
      REQUIRE(moment(pk, walk_name).bytes == m.bytes);
    };
    if (m.name == "forward_attention" && m.layer == L - 1) same("forward_attention");
    if (m.name == "backward_mlp" && m.layer == L - 1) same("backward_mlp_last_layer");
    if (m.name == "backward_mlp" && m.layer == 0) same("backward_mlp_first_layer");
    if (m.name == "backward_attention" && m.layer == 0) same("backward_attention_first_layer");
    if (m.name == "backward_attention" && m.layer == L - 1) same("backward_attention_last_layer");
    if (m.layer < 0 && m.name != "forward_attention") same(m.name);
  }
  REQUIRE(forward == L);
  REQUIRE(mlp == L);
  REQUIRE(attention == L);
  REQUIRE(tl.front().phase == "forward");
  REQUIRE(tl.back().name == "zero_grad");
}
