// Framework behaviours as rules (src/step/rules/): lifetimes, what each rule does to the saved
// tensors, and that every rule has its file and its row in docs/design.md.
#include "step/rules/rules.hpp"

#include "model/adapters.hpp"
#include "step/step_build.hpp"
#include "testutil.hpp"

#include <memest/activation.hpp>
#include <memest/hf_config.hpp>
#include <memest/precision.hpp>
#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>

using namespace memest;
using detail::Lifetime;
using detail::StepOf;
using memest::test::tiny_llama;

namespace {

Step saved_step(const RunSpec& run) {
  Step step;
  detail::add_saved_tensors(step, *activation_inputs(run));
  return step;
}

std::size_t index_of(const Step& step, std::string_view name) {
  for (std::size_t i = 0; i < step.tensors.size(); ++i) {
    if (step.tensors[i].name == name) return i;
  }
  FAIL("no tensor " << name);
  return 0;
}

}  // namespace

TEST_CASE("a lifetime spans moments in step order, or wraps into the next step", "[rules]") {
  const Lifetime loss{MomentKind::forward_end, MomentKind::backward_start, 0};
  CHECK(loss.live_at(MomentKind::forward_end, StepOf::steady));
  CHECK(loss.live_at(MomentKind::backward_start, StepOf::first));
  CHECK_FALSE(loss.live_at(MomentKind::forward_attention, StepOf::steady));
  CHECK_FALSE(loss.live_at(MomentKind::backward_mlp, StepOf::steady));
  // From backward_start to the next step's forward_end: a steady step holds it at both ends,
  // the first step (no step before it) from backward_start only.
  const Lifetime carried{MomentKind::backward_start, MomentKind::forward_end, 0};
  CHECK(carried.live_at(MomentKind::forward_attention, StepOf::steady));
  CHECK(carried.live_at(MomentKind::zero_grad, StepOf::steady));
  CHECK_FALSE(carried.live_at(MomentKind::forward_attention, StepOf::first));
  CHECK_FALSE(carried.live_at(MomentKind::forward_end, StepOf::first));
  CHECK(carried.live_at(MomentKind::optimizer, StepOf::first));
  const Lifetime gap{MomentKind::forward_end, MomentKind::post_backward,
                     detail::bit(MomentKind::head_step_in_backward)};
  CHECK(gap.live_at(MomentKind::backward_start, StepOf::steady));
  CHECK_FALSE(gap.live_at(MomentKind::head_step_in_backward, StepOf::steady));
  CHECK(gap.live_at(MomentKind::post_backward, StepOf::steady));
  CHECK_FALSE(gap.live_at(MomentKind::backward_end, StepOf::steady));
}

TEST_CASE("every rule has a file of its name and a row in docs/design.md", "[rules]") {
  const std::string root = MEMEST_SOURCE_DIR;
  const std::string design = test::read_file(root + "/docs/design.md");
  std::set<std::string> named;
  for (const detail::Rule* r : detail::step_rules()) {
    const std::string file = "src/step/rules/" + std::string(r->name) + ".cpp";
    INFO(file);
    CHECK(r->applies != nullptr);
    CHECK((r->flow || r->saved || r->lived || r->stash));
    CHECK(std::filesystem::exists(root + "/" + file));
    CHECK(design.find(file) != std::string::npos);
    named.insert(file);
  }
  // And no file in the folder is a rule the list leaves out.
  for (const auto& f : std::filesystem::directory_iterator(root + "/src/step/rules")) {
    const std::string file = "src/step/rules/" + f.path().filename().string();
    if (f.path().extension() != ".cpp" || file == "src/step/rules/rules.cpp") continue;
    INFO(file);
    CHECK(named.count(file) == 1);
  }
}

TEST_CASE("softmax_keeps_input keeps each softmax's input beside its output", "[rules]") {
  RunSpec run = tiny_llama("bf16", 2, 8);
  run.training.softmax_keeps_input = true;
  run.training.recompute = Recompute::selective;
  const Step step = saved_step(run);
  const std::size_t out = index_of(step, "softmax output (softmax(dtype=float32))");
  const Tensor& input = step.tensors[out + 1];
  CHECK(input.name == "softmax input, the scores in softmax's dtype (PyTorch < 1.11)");
  CHECK(input.bytes.c == step.tensors[out].bytes.c);
  CHECK(input.scope == Scope::core);  // recomputed with its output under selective recompute
  const std::size_t lp = index_of(step, "log_softmax(logits.float()) (fp32 N x V)");
  CHECK(step.tensors[lp + 1].name == "log_softmax input, the fp32 logits (PyTorch < 1.11)");
  // 4 B x N x V = 4 x 16 x 100 at b = 2, s = 8.
  CHECK(step.tensors[lp + 1].bytes.at(basis_at(2, 8)) == 6'400);
}

TEST_CASE("LitGPT's modules: model-dtype norms, one fused qkv adapter, v as a view",
          "[rules][lora]") {
  RunSpec run = tiny_llama("bf16", 2, 8);
  run.training.model_code = ModelCode::litgpt;
  run.training.attention = Attention::sdpa;
  LoraSpec lora;
  lora.rank = 8;
  lora.targets = {"q", "v", "o"};
  apply_lora(run.model, lora);
  const Step step = saved_step(run);
  const Tensor& norm =
      step.tensors[index_of(step, "input RMSNorm: input, in the model's dtype (LitGPT)")];
  CHECK(norm.width == 2);
  CHECK(step.tensors[index_of(step, "input RMSNorm: rsqrt (fp32, one per row)")].width == 2);
  // The fused adapter comes first among the layer's adapters, o_proj's after it; no separate
  // q or v adapter remains. Its lora_A has rank r per adapted projection (2 x 8), and zero_pad
  // keeps its source, N x (64 + 64) adapted outputs in bf16, since k is not adapted.
  const std::size_t fused =
      index_of(step, "LoRA on the fused qkv: lora_A output (the conv1d's input)");
  const std::size_t o = index_of(step, "LoRA on o_proj: lora_A output (rank r, lora_B input)");
  CHECK(fused < o);
  CHECK(step.tensors[fused].bytes.at(basis_at(2, 8)) == 2 * 16 * 16);
  const std::size_t pad =
      index_of(step, "LoRA on the fused qkv: zero_pad's index_copy source (adapted widths)");
  CHECK(step.tensors[pad].bytes.at(basis_at(2, 8)) == 2 * 16 * 128);
  for (const Tensor& t : step.tensors) CHECK(!t.name.starts_with("LoRA on q/k/v"));
  // Without GQA the kernel keeps the fused output v is a view of: N x (a + 2k) x d in bf16.
  const Tensor& v =
      step.tensors[index_of(step, "v, a view of the fused qkv output (LitGPT: all of it kept)")];
  CHECK(v.bytes.at(basis_at(2, 8)) == 2 * 16 * 12 * 16);
}
