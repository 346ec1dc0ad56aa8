#include "model/adapters.hpp"
#include "testutil.hpp"

#include <memest/activation.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
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

// PyTorch before 1.11 (pytorch/pytorch#64000): softmax keeps its input, the attention scores,
// in the dtype it computes in: fp32 here, and fp32 under CUDA autocast too (softmax is on
// autocast's fp32 list), so 4 b a s^2 more per layer either way. The loss's log_softmax keeps
// its fp32 input, the N x V logits.
TEST_CASE("PyTorch < 1.11 (--softmax-keeps-input) keeps the scores and the fp32 logits",
          "[activation]") {
  const auto policy = GENERATE(as<std::string>{}, "fp32", "amp");
  auto r = run_of("gpt2", policy, 2, 128);
  const auto before = saved(r);
  r.training.softmax_keeps_input = true;
  const auto after = saved(r);
  const std::uint64_t S2 = 2 * 12 * 128 * 128, NV = 2 * 128 * 50257;
  REQUIRE(after.per_layer - before.per_layer == 4 * S2);
  REQUIRE(after.head - before.head == 4 * NV);
}

TEST_CASE("every family gets activations, and unmeasured ones are marked approximate",
          "[activation]") {
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

namespace {

// Llama-2-7B, bf16, flash attention, b = 1, s = 4096 (the test above): N = 4096, h = 4096,
// I = 11008, V = 32000. Nh = 16,777,216; NI = 45,088,768; NV = 131,072,000.
constexpr std::uint64_t kNh = 16'777'216, kNI = 45'088'768, kNV = 131'072'000, kN = 4096;
constexpr std::uint64_t kFlashLayer = 763'920'400;  // every weight trained (the test above)

RunSpec llama_lora(double dropout) {
  auto r = run_of("llama-2-7b", "bf16", 1, 4096);
  r.training.attention = Attention::flash;
  r.training.lora_dropout = dropout;
  apply_lora(r.model, LoraSpec{8, {"q", "v"}, false, false});
  return r;
}

std::uint64_t moment_bytes(const RunSpec& r, std::string_view name) {
  const auto e = estimate(r);
  std::uint64_t best = 0;
  for (const auto& m : e.peak->moments)
    if (m.name == name) best = std::max(best, m.bytes);
  return best;
}

}  // namespace

TEST_CASE("LoRA on q,v: the frozen base keeps no input for its weights", "[activation][lora]") {
  // What a layer stops keeping when every base weight is frozen (autograd saves mm's input
  // only for the weight's gradient, mul's operand only for the other operand's):
  //   the two RMSNorms' normed outputs (weight * hs: kept for the weight) 2 x 2 Nh,
  //   the MLP input (gate/up input) 2 Nh, the down_proj input (act x up) 2 NI
  //   = 67,108,864 + 33,554,432 + 90,177,536 = 190,840,832.
  // The attention input stays (lora_A reads it), the flash output stays (the kernel keeps it).
  // Each adapter adds its lora_A output, N x r x 2 B = 65,536: two adapters 131,072.
  const auto a = saved(llama_lora(0));
  const std::uint64_t layer = kFlashLayer - 190'840'832 + 131'072;  // 573,210,640
  REQUIRE(a.per_layer == layer);
  // The first layer's input (a frozen embedding's output) does not require grad: its input
  // RMSNorm keeps neither the fp32 input (4 Nh) nor the rsqrt (4 N).
  const std::uint64_t first = 4 * kNh + 4 * kN;
  // Head: the final norm keeps its fp32 input and rsqrt (its input requires grad), not its
  // output (frozen weight); the frozen lm_head keeps no input; log-probs 4 NV; target 8 (s+1);
  // total_weight 4.
  const std::uint64_t head = 4 * kNh + 4 * kN + 4 * kNV + 8 * 4097 + 4;  // 591,446,028
  REQUIRE(a.head == head);
  REQUIRE(a.layers == 32 * layer - first);
}

TEST_CASE("LoRA dropout keeps a mask and the dropped input per adapter", "[activation][lora]") {
  // PEFT and torchtune give each adapter its own nn.Dropout: a bool mask (N h x 1 B) when the
  // input requires grad, and the dropped input lora_A reads (N h x 2 B): 3 Nh per adapter.
  // Without dropout lora_A read the norm output itself, which the frozen q/k/v projections do
  // not keep: with dropout that 2 Nh goes.
  const auto plain = saved(llama_lora(0)), dropped = saved(llama_lora(0.05));
  REQUIRE(dropped.per_layer - plain.per_layer == 2 * 3 * kNh - 2 * kNh);
  // The first layer's input does not require grad: no masks there.
  REQUIRE(dropped.layers - plain.layers == 32 * 4 * kNh - 2 * kNh);
}

TEST_CASE("bitsandbytes before 0.43.2 keeps every 4-bit linear's input", "[activation][lora]") {
  // MatMul4Bit kept ctx.tensors = (A, B) until bitsandbytes PR #1270: the inputs the frozen
  // base no longer keeps come back, the MLP input (2 Nh) and the down_proj input (2 NI); the
  // attention input and o_proj's input are kept anyway (lora_A, the flash kernel).
  auto r = llama_lora(0);
  apply_lora(r.model, LoraSpec{8, {"q", "v"}, true, false});
  const auto nf4 = saved(r);
  r.training.nf4_keeps_input = true;
  REQUIRE(saved(r).per_layer - nf4.per_layer == 2 * kNh + 2 * kNI);
}

// LitGPT's modules (lit_gpt/model.py, rmsnorm.py and lora.py @8641822) against transformers',
// per layer, for the same LoRA on q, v with dropout (N = h = 4096, flash, Llama-2-7B):
//   two RMSNorms keep their input and rsqrt in bf16, not fp32: -2 x (2 Nh + 2 N);
//   one dropout for the fused q/v adapter instead of two (-3 Nh), its lora_A output of rank 2r
//   (the same bytes as two of rank r), and zero_pad's index_copy source, N x 2h in bf16
//   (+4 Nh);
//   v is a view of the fused qkv output, so all of it stays: 6 Nh instead of v's 2 Nh (+4 Nh).
// In all: Nh - 4 N. The final RMSNorm saves 2 Nh + 2 N less in the head.
TEST_CASE("LitGPT model code: its norms, fused qkv LoRA and view of v", "[activation][lora]") {
  auto r = llama_lora(0.05);
  const auto hf = saved(r);
  r.training.model_code = ModelCode::litgpt;
  const auto lit = saved(r);
  REQUIRE(lit.per_layer - hf.per_layer == kNh - 4 * kN);
  REQUIRE(hf.head - lit.head == 2 * kNh + 2 * kN);
}

// phi-1.5 under LitGPT runs F.gelu(approximate="tanh"), which keeps its input only, where
// transformers' NewGELUActivation keeps four N x I tensors (and three float64 scalars):
// -6 NI - 24 bytes; LayerNorm is the same; the LoRA and v terms are +Nh and +4Nh as above.
TEST_CASE("LitGPT model code: phi's F.gelu keeps one N x I tensor", "[activation][lora]") {
  auto r = run_of("phi-1.5", "bf16", 1, 1044);
  r.training.attention = Attention::sdpa;
  r.training.lora_dropout = 0.05;
  apply_lora(r.model, LoraSpec{8, {"q", "v"}, false, false});
  const auto hf = saved(r);
  r.training.model_code = ModelCode::litgpt;
  const auto lit = saved(r);
  const std::uint64_t Nh = 1044ULL * 2048, NI = 1044ULL * 8192;
  REQUIRE(hf.per_layer - lit.per_layer == 6 * NI + 24 - 5 * Nh);
}

TEST_CASE("a model trained only in its head keeps nothing in its layers", "[activation]") {
  auto r = run_of("llama-2-7b", "bf16", 1, 4096);
  const std::array<Role, 4> frozen = {Role::embedding, Role::attention, Role::mlp, Role::norm};
  freeze_roles(r.model.inventory, frozen);
  const auto a = saved(r);
  REQUIRE(a.layers == 0);
  REQUIRE(a.shared == 0);  // no q or k requires grad: rotary's cos and sin are not kept
  // The lm_head keeps its input (2 Nh); the final norm nothing (frozen, input without grad).
  REQUIRE(a.head == 2 * kNh + 4 * kNV + 8 * 4097 + 4);
}

TEST_CASE("chunked cross-entropy: the backward transient is one chunk's", "[activation][loss]") {
  // hf: backward starts with two fp32 N x V gradients (log-probs, logits): 8 NV. torchtune's
  // CEWithChunkedOutputLoss with 8 chunks: two fp32 gradients of one chunk, 8 NV / 8; the
  // saved fp32 log-probs are the same (every chunk keeps its own). So the moment is 7 NV less.
  auto r = llama_lora(0);
  const std::uint64_t hf = moment_bytes(r, "backward_start");
  r.training.loss = Loss::chunked;
  r.training.loss_chunk = 8;
  REQUIRE(hf - moment_bytes(r, "backward_start") == 7 * kNV);
  // Forward end: hf holds the whole fp32 upcast (4 NV), torchtune one chunk's (4 NV / 8).
  r.training.loss = Loss::hf;
  const std::uint64_t hf_fwd = moment_bytes(r, "forward_end");
  r.training.loss = Loss::chunked;
  REQUIRE(hf_fwd - moment_bytes(r, "forward_end") == 4 * kNV * 7 / 8);
  // 16 chunks: 8 NV - 8 NV / 16.
  r.training.loss_chunk = 16;
  REQUIRE(hf - moment_bytes(r, "backward_start") == 8 * kNV - kNV / 2);
}

TEST_CASE("LitGPT's chunked cross-entropy keeps bf16 log-probs and the logits",
          "[activation][loss]") {
  // chunked_cross_entropy on bf16 logits: log_softmax keeps 2 NV (hf: 4 NV); backward starts
  // with two bf16 gradients of one 128-position chunk (2 x 2 x 128 x V) and the logits the
  // training loop still holds (2 NV); hf has two fp32 N x V gradients (8 NV).
  auto r = llama_lora(0);
  const auto hf_saved = saved(r);
  const std::uint64_t hf = moment_bytes(r, "backward_start");
  r.training.loss = Loss::chunked_tokens;
  r.training.loss_chunk = 128;
  REQUIRE(hf_saved.head - saved(r).head == 2 * kNV);
  const std::uint64_t chunk = 2 * 2 * 128 * 32000ULL;
  REQUIRE(hf - moment_bytes(r, "backward_start") == 2 * kNV + 8 * kNV - chunk - 2 * kNV);
}

TEST_CASE("Fabric's fp32 output: LitGPT's logits, log-probs and chunk gradients in fp32",
          "[activation][loss]") {
  // Lightning's _FabricModule.forward casts the bf16 logit chunks to fp32 (convert_output):
  // the loss's log_softmax keeps 4 NV instead of 2 NV, the logits the loop holds are 4 NV
  // instead of 2 NV, and the two gradients of one 128-position chunk are 2 x 4 x 128 x V
  // instead of 2 x 2 x 128 x V.
  auto r = llama_lora(0);
  r.training.loss = Loss::chunked_tokens;
  r.training.loss_chunk = 128;
  const auto bf16_saved = saved(r);
  const std::uint64_t bf16 = moment_bytes(r, "backward_start");
  r.training.output_fp32 = true;
  REQUIRE(saved(r).head - bf16_saved.head == 2 * kNV);
  REQUIRE(saved(r).per_layer == bf16_saved.per_layer);
  const std::uint64_t chunk = 2 * 2 * 128 * 32000ULL;
  REQUIRE(moment_bytes(r, "backward_start") - bf16 == 2 * kNV + 2 * kNV + chunk);
  // transformers' loss on logits already fp32: no bf16 N x V logits beside logits.float().
  r.training.loss = Loss::hf;
  const std::uint64_t cast = moment_bytes(r, "forward_end");
  r.training.output_fp32 = false;
  REQUIRE(moment_bytes(r, "forward_end") - cast == 2 * kNV);
}

TEST_CASE("QLoRA: down_proj's backward dequantises its weight beside the input gradient",
          "[activation][lora]") {
  // bitsandbytes' MatMul4Bit.backward: grad_A = grad_output @ dequantize_4bit(B): the h x I
  // weight in bf16 (2 hI = 90,177,536 B) lives beside the N x I input gradient (2 NI). The
  // MulBackward0 moment it competes with holds the two N x I gradients of act(gate) and up
  // (2 x 2 NI). At b = 1, s = 512 (N = 512, NI = 5,636,096) the dequantised moment is larger
  // by 2 hI + 2 NI - 4 NI = 78,905,344 B; everything else but the stored parameters is the same.
  auto lora = run_of("llama-2-7b", "bf16", 1, 512);
  lora.training.attention = Attention::flash;
  auto qlora = lora;
  apply_lora(lora.model, LoraSpec{8, {"q", "v"}, false, false});
  apply_lora(qlora.model, LoraSpec{8, {"q", "v"}, true, false});
  const auto without_params = [](const RunSpec& r) {
    return moment_bytes(r, "backward_mlp_last_layer") - *estimate(r).at("params").bytes;
  };
  REQUIRE(without_params(qlora) - without_params(lora) == 2 * 4096 * 11008ULL - 2 * 5'636'096ULL);
}
