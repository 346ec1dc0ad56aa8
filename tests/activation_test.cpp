#include "testutil.hpp"

#include <memest/activation.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

using namespace memest;
using memest::test::run_of;

namespace {

ActivationBytes saved(const RunSpec& r) { return activation_bytes(*activation_inputs(r)); }

}  // namespace

TEST_CASE("no --batch/--seq: activations are not estimated", "[activation]") {
  auto r = run_of("gpt2", "fp32", 0, 0);
  REQUIRE_FALSE(activation_inputs(r));
  const auto e = estimate(r);
  REQUIRE_FALSE(e.at("activations").bytes);
  REQUIRE_FALSE(e.peak);
  REQUIRE_FALSE(e.total_complete);
}

TEST_CASE("GPT-2 bf16 per layer is Korthikanti et al.'s formula plus HF's unfused gelu_new",
          "[activation]") {
  // Korthikanti et al. 2022, eq. 1: s*b*h*(34 + 5*a*s/h) bytes per layer for 16-bit
  // activations with dropout everywhere. HF's gelu_new is a Python tanh formula that keeps
  // three more 4h-wide bf16 tensors, 24*s*b*h; the paper ignores LayerNorm's mean and rstd
  // (2 norms x 2 x 2 B x b*s on the CPU, where they stay bf16) and the 0-d divisor (2 B) and
  // gelu_new's three wrapped scalars (24 B). gpt2: h 768, a 12, s 1024, b 4:
  //   34*sbh = 34 x 3,145,728 = 106,954,752; 5*a*s^2*b = 5 x 50,331,648 = 251,658,240;
  //   24*sbh = 75,497,472; 8*b*s = 32,768; + 26  ->  434,143,258 bytes.
  auto r = run_of("gpt2", "bf16", 4, 1024);
  r.training.device = Device::cpu;
  const std::uint64_t s = 1024, b = 4, h = 768, a = 12;
  const std::uint64_t korthikanti = s * b * h * 34 + 5 * a * s * s * b;
  REQUIRE(saved(r).per_layer == korthikanti + 24 * s * b * h + 8 * b * s + 26);
  REQUIRE(saved(r).per_layer == 434'143'258);
  // On CUDA LayerNorm keeps fp32 statistics: 8*b*s more.
  r.training.device = Device::cuda;
  REQUIRE(saved(r).per_layer == 434'143'258 + 8 * b * s);
}

TEST_CASE("Llama-2-7B, bf16, b=1, s=4096: eager vs flash, recompute none/selective/full",
          "[activation]") {
  // h 4096, a = k = 32, d 128, I 11008, V 32000, L 32; N = b*s = 4096.
  //   Nh = Nad = 16,777,216; NI = 45,088,768; S2 = b*a*s^2 = 536,870,912.
  // bf16 layer (derivation §3.1): 16 Nh + 8 N + 8 Nad + 6 S2 + 8 NI + 8
  //   = 268,435,456 + 32,768 + 134,217,728 + 3,221,225,472 + 360,710,144 + 8
  //   = 3,984,621,576 (the scores are 81% of it).
  // head: RMSNorm 6 Nh + 4 N = 100,679,680; lm_head input 2 Nh = 33,554,432;
  //   log-probs 4 N V = 524,288,000; target 8 (s+1) = 32,776 (batch 1); total_weight 4
  //   = 658,554,892. shared: cos + sin 2 s d x 2 B = 2,097,152.
  auto r = run_of("llama-2-7b", "bf16", 1, 4096);
  const std::uint64_t head = 658'554'892, cos_sin = 2'097'152;
  auto a = saved(r);
  REQUIRE(a.per_layer == 3'984'621'576);
  REQUIRE(a.head == head);
  REQUIRE(a.shared == cos_sin);
  REQUIRE(a.total == 32 * 3'984'621'576ULL + cos_sin + head);  // 128,168,542,476 B

  // Selective recompute drops the attention core: 6 S2 + the 8-byte scalar.
  r.training.recompute = Recompute::selective;
  REQUIRE(saved(r).per_layer == 3'984'621'576 - 6 * 536'870'912ULL - 8);  // 763,396,096

  // Flash: no scores; the kernel keeps q, k, v, the output and 4*b*a*s log-sum-exp + 16 B.
  r.training.recompute = Recompute::none;
  r.training.attention = Attention::flash;
  REQUIRE(saved(r).per_layer == 763'396'096 + 4 * 32 * 4096 + 16);  // 763,920,400

  // Full recompute: each layer keeps its bf16 input, 2 Nh = 33,554,432; the causal mask
  // (s^2 x 2 B) becomes a checkpoint argument only with eager attention's additive mask.
  r.training.attention = Attention::eager;
  r.training.recompute = Recompute::full;
  a = saved(r);
  REQUIRE(a.per_layer == 33'554'432);
  REQUIRE(a.full_layer == 3'984'621'576);
  REQUIRE(a.total == 32 * 33'554'432ULL + cos_sin + 4096ULL * 4096 * 2 + head);
}

TEST_CASE("autocast saves a cast of the norm output per projection", "[activation]") {
  // Llama under autocast: 26 Nh (fp32 norms, five bf16 casts) vs 16 Nh in pure bf16.
  auto amp = run_of("tinyllama-1.1b", "amp-bf16", 2, 256);
  auto bf16 = run_of("tinyllama-1.1b", "bf16", 2, 256);
  const std::uint64_t Nh = 2 * 256 * 2048;
  REQUIRE(saved(amp).per_layer - saved(bf16).per_layer == 10 * Nh);
}

TEST_CASE("dropout masks appear only when the probability is positive", "[activation]") {
  auto r = run_of("gpt2", "fp32", 2, 128);
  r.training.device = Device::cpu;
  const auto with = saved(r);
  r.training.dropout = 0.0;
  const auto without = saved(r);
  // attention mask + dropped output (1 + 4) b a s^2, two residual masks 2 N h, embedding N h.
  const std::uint64_t S2 = 2 * 12 * 128 * 128, Nh = 2 * 128 * 768;
  REQUIRE(with.per_layer - without.per_layer == 5 * S2 + 2 * Nh);
  REQUIRE(with.embed - without.embed == Nh);
}

TEST_CASE("every family gets activations; unmeasured ones are marked approximate", "[activation]") {
  auto [preset, measured] = GENERATE(table<std::string, bool>({{"llama-2-7b", true},
                                                               {"gpt2", true},
                                                               {"qwen2.5-7b", true},
                                                               {"mistral-7b-v0.1", true},
                                                               {"mixtral-8x7b", false},
                                                               {"gemma-2-2b", false},
                                                               {"phi-2", false},
                                                               {"gpt-j-6b", false},
                                                               {"pythia-70m", false},
                                                               {"falcon-7b", false},
                                                               {"opt-125m", false},
                                                               {"bert-base-uncased", false},
                                                               {"deepseek-v2-lite", false},
                                                               {"phi-3-mini-4k-instruct", false},
                                                               {"t5-small", false},
                                                               {"olmo-1b", false}}));
  CAPTURE(preset);
  const auto e = estimate(run_of(preset, "amp-bf16", 2, 512));
  REQUIRE(e.at("activations").bytes);
  REQUIRE(*e.at("activations").bytes > 0);
  REQUIRE(e.peak);
  REQUIRE(e.peak->bytes > e.at("params").bytes.value());
  REQUIRE(e.activations_approximate == !measured);
}

TEST_CASE("MoE: each token's expert MLP activations times the experts per token", "[activation]") {
  auto r = run_of("mixtral-8x7b", "bf16", 1, 1024);
  auto in = *activation_inputs(r);
  const auto two = activation_bytes(in);
  in.topk = 1;
  const auto one = activation_bytes(in);
  // One more expert per token: its SwiGLU (4 x 2 B x N x I) and its gathered input and output
  // (2 x 2 B x N x h) and 12 B of routing weight and index per token.
  const std::uint64_t N = 1024, h = 4096, I = 14336;
  REQUIRE(two.mlp - one.mlp == 8 * N * I + 4 * N * h + 12 * N);
}

TEST_CASE("a bare parameter count assumes a canonical decoder shape", "[activation]") {
  const auto a = canonical_architecture(6'738'415'616);
  REQUIRE(a.hidden_size == 4096);
  REQUIRE(a.num_layers == 32);  // round((P - 2 x 32000 x 4096) / (12 x 4096^2)) = round(32.2)
  REQUIRE(a.intermediate_size == 11008);
  REQUIRE(a.num_heads == 32);
  RunSpec r;
  r.model = model_from_count(7'000'000'000);
  r.precision = precision_preset("bf16");
  r.training.micro_batch = 1;
  r.training.seq_len = 2048;
  const auto e = estimate(r);
  REQUIRE(e.activations_approximate);
  REQUIRE(e.at("params").bytes == 14'000'000'000ULL);  // exact from the count
  REQUIRE(e.at("activations").bytes);
  bool stated = false;
  for (const auto& s : e.assumptions) stated = stated || s.find("canonical") != std::string::npos;
  REQUIRE(stated);
}

TEST_CASE("each --explain formula multiplies out to its tensor's bytes", "[activation]") {
  auto preset = GENERATE("llama-2-7b", "gpt2", "mixtral-8x7b", "phi-2", "gemma-2-2b");
  auto attention = GENERATE(Attention::eager, Attention::sdpa, Attention::flash);
  auto recompute = GENERATE(Recompute::none, Recompute::selective, Recompute::full);
  auto r = memest::test::run_of(preset, "amp-bf16", 3, 2000);
  r.training.attention = attention;
  r.training.recompute = recompute;
  r.training.dropout = 0.1;
  const auto e = estimate(r);
  REQUIRE_FALSE(e.activations->terms.empty());
  for (const auto& t : e.activations->terms) {
    CAPTURE(preset, t.name);
    // "2000 x 32 x 128": the factors as the formula prints them.
    std::uint64_t product = t.width;
    std::istringstream values(t.shape.values(3, 2000));
    for (std::string word; values >> word;) {
      if (word != "x") product *= std::stoull(word);
    }
    REQUIRE(product == t.bytes);
  }
}
