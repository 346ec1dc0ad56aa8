#include "model/adapters.hpp"

#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>
#include <memest/model.hpp>

#include <array>
#include <string>

using namespace memest;

namespace {

std::uint64_t unquantised_role_sum(const Inventory& inv, Role role) {
  std::uint64_t n = 0;
  for (const auto& g : inv.groups) {
    if (g.role == role && !g.quant_state) n += g.elements();
  }
  return n;
}

std::uint64_t quant_state_bytes(const Inventory& inv) {
  Inventory q;
  for (const auto& g : inv.groups) {
    if (g.quant_state) q.groups.push_back(g);
  }
  return parameter_bytes(q, Dtype::bf16);
}

}  // namespace

TEST_CASE("freezing roles removes them from the trainable counts", "[adapters]") {
  ModelSpec m = load_model_preset("llama-2-7b");
  const std::array roles = {Role::embedding, Role::head};
  freeze_roles(m.inventory, roles);
  // embed_tokens and lm_head: 2 x 32000 x 4096 = 262144000
  CHECK(trainable_count(m.inventory) == 6738415616 - 262144000);
  CHECK(trainable_tensor_count(m.inventory) == 291 - 2);
  CHECK(parameter_count(m.inventory) == 6738415616);
}

TEST_CASE("LoRA adapters follow from rank and shapes", "[adapters]") {
  auto [preset, rank, targets, trainable] =
      GENERATE(table<std::string, std::uint64_t, std::vector<std::string>, std::uint64_t>({
          // Llama-2-7B, r=16 on q,v: 32 layers x 2 x 16 x (4096 + 4096) = 8,388,608, the
          // figure PEFT prints ("trainable params: 8,388,608 || all params: 6,746,804,224").
          {"llama-2-7b", 16, {"q", "v"}, 8388608},
          // all-linear, r=8: per layer q,k,v,o 4 x 8 x 8192 = 262144 and gate,up,down
          // 3 x 8 x (4096 + 11008) = 362496 -> 624640 x 32 = 19,988,480 (lm_head excluded)
          {"llama-2-7b", 8, {"all-linear"}, 19988480},
          // Llama-3-8B GQA, r=16 on k: 32 x 16 x (4096 + 1024) = 2,621,440
          {"llama-3-8b", 16, {"k"}, 2621440},
          // GPT-2: q names the fused c_attn (768 -> 2304), adapted once at full width:
          // 12 x 8 x (768 + 2304) = 294,912; adding k and v changes nothing
          {"gpt2", 8, {"q"}, 294912},
          {"gpt2", 8, {"q", "k", "v"}, 294912},
          // GPT-2 up/down are c_fc (768 -> 3072) and mlp.c_proj: 12 x 2 x 4 x 3840 = 368,640
          {"gpt2", 4, {"up", "down"}, 368640},
          // Mixtral, r=8 on gate: 32 layers x 8 experts x 8 x (4096 + 14336) = 37,748,736
          {"mixtral-8x7b", 8, {"gate"}, 37748736},
      }));
  INFO(preset);
  ModelSpec m = load_model_preset(preset);
  const std::uint64_t base = parameter_count(m.inventory);
  apply_lora(m, {rank, targets, false, false});
  CHECK(trainable_count(m.inventory) == trainable);
  CHECK(unquantised_role_sum(m.inventory, Role::adapter) == trainable);
  CHECK(parameter_count(m.inventory) == base + trainable);
  // Every adapter group is a matmul weight; the whole base is frozen.
  for (const auto& g : m.inventory.groups) {
    CHECK(g.trainable == (g.role == Role::adapter));
    if (g.role == Role::adapter) CHECK(g.matmul);
  }
}

TEST_CASE("LoRA on routed experts counts top-k of them as active", "[adapters]") {
  ModelSpec m = load_model_preset("mixtral-8x7b");
  const std::uint64_t active = m.active_params;
  apply_lora(m, {8, {"gate"}, false, false});
  // 37,748,736 adapter parameters over 8 experts, 2 used per token
  CHECK(m.active_params == active + 37748736 / 8 * 2);
}

TEST_CASE("QLoRA stores the base matmul weights as nf4 with block constants", "[adapters]") {
  // Llama-2-7B: the Linear weights (all but lm_head) hold
  // 32 x (4 x 4096^2 + 3 x 4096 x 11008) = 6,476,005,376 parameters -> 3,238,002,688 nf4 bytes.
  // Blocks of 64: 32 x (4 x 262,144 + 3 x 704,512) = 101,187,584.
  ModelSpec plain = load_model_preset("llama-2-7b");
  ModelSpec q = plain;
  apply_lora(q, {16, {"q", "v"}, true, false});
  // fp32 absmax per block: 404,750,336 bytes = 0.5 bit per quantized parameter
  CHECK(quant_state_bytes(q.inventory) == 404750336);
  CHECK(quant_state_bytes(q.inventory) * 8 * 1000 / 6476005376 == 500);
  // quant state is stored but not counted as parameters or tensors
  CHECK(parameter_count(q.inventory) == 6738415616 + 8388608);
  CHECK(tensor_count(q.inventory) == 291 + 2 * 2 * 32);
  // bf16 for what stays unquantized: embed + lm_head 262,144,000 + norms 266,240 and the
  // adapters 8,388,608 -> 2 x 270,798,848 = 541,597,696; + nf4 3,238,002,688 + absmax
  CHECK(parameter_bytes(q.inventory, Dtype::bf16) == 541597696 + 3238002688 + 404750336);

  ModelSpec dq = plain;
  apply_lora(dq, {16, {"q", "v"}, true, true});
  // 8-bit absmax 101,187,584 bytes + fp32 per 256 blocks: 32 x (4 x 1024 + 3 x 2752) x 4 =
  // 1,581,056 -> 102,768,640 bytes = 0.127 bit per parameter (Dettmers et al. 2023)
  CHECK(quant_state_bytes(dq.inventory) == 102768640);
  CHECK(quant_state_bytes(dq.inventory) * 8 * 1000 / 6476005376 == 126);  // 0.1269...
  // The lm_head stays in the policy dtype.
  for (const auto& g : dq.inventory.groups) {
    if (g.kind == "lm_head") CHECK_FALSE(g.storage.has_value());
  }
}

TEST_CASE("bad LoRA requests name the problem", "[adapters]") {
  ModelSpec m = load_model_preset("gpt2");
  REQUIRE_THROWS_WITH(apply_lora(m, {8, {"qq"}, false, false}),
                      "unknown LoRA target \"qq\" (expected one of: q, k, v, o, gate, up, down, "
                      "all-linear)");
  REQUIRE_THROWS_WITH(apply_lora(m, {0, {"q"}, false, false}),
                      "LoRA rank: expected a positive integer, got 0");
  REQUIRE_THROWS_WITH(apply_lora(m, {8, {"gate"}, false, false}),
                      "LoRA targets \"gate\" match no module of this gpt2 model (its modules: "
                      "down, o, qkv, up; expected one of: q, k, v, o, gate, up, down, all-linear)");
  ModelSpec bare = model_from_count(7000000000);
  REQUIRE_THROWS_WITH(apply_lora(bare, {8, {"q"}, false, false}),
                      "LoRA needs the model's shapes (expected a model preset or a config.json, "
                      "not a bare parameter count)");
}

// PEFT from 0.11 keeps the adapters in fp32 over a bf16 model (--adapter-dtype fp32): TinyLlama
// with rank 8 on q and v has 22 x (8 x 2048 + 2048 x 8 + 8 x 2048 + 256 x 8) = 1,126,400 adapter
// parameters, 4 B each, their gradients 4 B and Adam's two states 8 B; the base stays 2 B.
TEST_CASE("fp32 adapters over a bf16 model: their bytes, gradients and states", "[lora]") {
  const std::uint64_t adapters = 22ULL * (8 * 2048 + 2048 * 8 + 8 * 2048 + 256 * 8);
  const std::uint64_t base = 1'100'048'384;  // TinyLlama-1.1B's published count
  const std::vector<std::string> run = {"--model", "tinyllama-1.1b", "--lora-rank",
                                        "8",       "--precision",    "bf16"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = run;
    args.insert(args.end(), extra.begin(), extra.end());
    return test::run_json(args)["categories"];
  };
  const auto fp32 = with({"--adapter-dtype", "fp32"});
  CHECK(fp32["params"]["bytes"] == 2 * base + 4 * adapters);
  CHECK(fp32["grads"]["bytes"] == 4 * adapters);
  CHECK(fp32["optimizer_states"]["bytes"] == 8 * adapters);
  const auto same = with({"--adapter-dtype", "base"});
  CHECK(same["params"]["bytes"] == 2 * (base + adapters));
  CHECK(same["grads"]["bytes"] == 2 * adapters);
  CHECK(with({})["optimizer_states"] == same["optimizer_states"]);
  const auto bad =
      test::run_cli({"--model", "tinyllama-1.1b", "--lora-rank", "8", "--adapter-dtype", "int8"});
  CHECK(bad.code == 2);
  CHECK(bad.err ==
        "memest: error: --adapter-dtype: unknown adapter dtype \"int8\" (expected one "
        "of: base, fp32, bf16, fp16)\n");
  const auto alone = test::run_cli({"--model", "tinyllama-1.1b", "--adapter-dtype", "fp32"});
  CHECK(alone.code == 2);
  CHECK(alone.err == "memest: error: --adapter-dtype needs --lora-rank\n");
}
