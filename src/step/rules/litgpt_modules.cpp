// LitGPT's modules (--model-code litgpt, set by --stack litgpt; docs/activations.md, "LitGPT's
// modules"), read in lit_gpt/model.py, rmsnorm.py and lora.py at 8641822: how a layer built from
// them keeps other tensors than transformers' (the layer graph, src/step/layer_graph.cpp).
// LitGPT's GptNeoxMLP calls F.gelu, one kernel that keeps its input: src/step/activation.cpp
// reads the activation function so.
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <memest/units.hpp>

#include <array>

namespace memest::detail {
namespace {

// RMSNorm (lit_gpt/rmsnorm.py) computes in the model's dtype: it keeps its input and the rsqrt
// in that dtype, not fp32.
void norms_in_model_dtype(Step& step, const ActivationInputs& in) {
  static constexpr std::array<std::pair<NormSite, std::string_view>, 6> kInputs = {{
      {NormSite::input, "input RMSNorm: input, in the model's dtype (LitGPT)"},
      {NormSite::post_attention, "post-attention RMSNorm: input, in the model's dtype (LitGPT)"},
      {NormSite::extra, "norm input, in the model's dtype (LitGPT)"},
      {NormSite::qk, "norm input, in the model's dtype (LitGPT)"},
      {NormSite::embedding, "norm input, in the model's dtype (LitGPT)"},
      {NormSite::final, "final RMSNorm: input, in the model's dtype (LitGPT)"},
  }};
  if (in.graph != LayerGraph::llama) return;
  for (Tensor& t : step.tensors) {
    for (const auto& [site, name] : kInputs) {
      const NormNames& hf = norm_names(site);
      if (t.name != hf.fp32_input && t.name != hf.rsqrt) continue;
      if (t.name == hf.fp32_input) t.name = name;
      t.width = in.ex;
      t = make_tensor(t);
      break;
    }
  }
}

// LoRAQKVLinear (lit_gpt/lora.py): the q, k and v adapters share one dropout and one lora_A, a
// grouped conv1d is their lora_B, and zero_pad scatters its output into the fused width with
// index_copy, whose backward keeps that source (N x the adapted widths) unless all three are
// adapted (then zero_pad returns it as it is). It takes the place of the q/k/v adapters, first
// among the layer's adapters.
void fused_qkv_adapter(Step& step, const ActivationInputs& in) {
  const GradFlow& g = in.grads;
  u64 rank = 0, out = 0, n = 0, width = 0;
  for (std::uint8_t i = 0; i < g.n_adapters; ++i) {
    const AdapterSite& a = g.adapters[i];
    if (a.slot != Slot::q_in) continue;
    rank += a.rank;
    out += a.out;
    width = a.in;
    ++n;
  }
  if (n == 0) return;
  const std::size_t at = find_tensor(step, [](const Tensor& t) { return is_lora_tensor(t); });
  // The shared dropout's mask is kept when the q/k/v adapters' masks were.
  const std::size_t mask =
      find_tensor(step, [](const Tensor& t) { return t.name == lora_names(Slot::q_in).mask; });
  const bool has_mask = mask < step.tensors.size();
  const bool mask_skips_first = has_mask && step.tensors[mask].skips_first;
  std::erase_if(step.tensors,
                [](const Tensor& t) { return is_lora_tensor(t) && t.slot == Slot::q_in; });
  const Shape x = shape({sym::N, dim("in", width)});
  const auto layer_tensor = [&](std::string_view name, u64 w, const Shape& sh) {
    return Tensor{.name = name,
                  .part = Part::activations,
                  .scope = Scope::layer,
                  .slot = Slot::q_in,
                  .width = w,
                  .shape = sh};
  };
  std::vector<Tensor> fused;
  if (has_mask) {
    fused.push_back(layer_tensor("LoRA on the fused qkv: dropout mask (bool)", 1, x));
    fused.back().skips_first = mask_skips_first;
  }
  if (g.lora_dropout > 0)
    fused.push_back(layer_tensor("LoRA on the fused qkv: dropped input (lora_A input)", in.ex, x));
  fused.push_back(layer_tensor("LoRA on the fused qkv: lora_A output (the conv1d's input)", in.ec,
                               shape({sym::N, dim("r x adapted", rank)})));
  if (n < 3) {
    fused.push_back(
        layer_tensor("LoRA on the fused qkv: zero_pad's index_copy source (adapted widths)", in.ec,
                     shape({sym::N, dim("adapted out", out)})));
  }
  for (std::size_t i = 0; i < fused.size(); ++i) insert_tensor(step, at + i, fused[i]);
}

// LitGPT splits one fused qkv output; without GQA, v stays a view of it (no expand copy), so the
// attention kernel keeps all of it.
void v_view_of_fused_qkv(Step& step, const ActivationInputs& in) {
  if (in.attention == Attention::eager || in.k != in.a) return;
  const std::size_t v = find_tensor(step, [](const Tensor& t) {
    return t.part == Part::activations && t.scope == Scope::layer && t.slot == Slot::v;
  });
  if (v == step.tensors.size()) return;
  Tensor& t = step.tensors[v];
  t.name = "v, a view of the fused qkv output (LitGPT: all of it kept)";
  t.shape = shape({sym::N, dim("a+2k", in.a + 2 * in.k), Dims(in).d});
  t = make_tensor(t);
}

void litgpt_layer(Step& step, const ActivationInputs& in) {
  norms_in_model_dtype(step, in);
  fused_qkv_adapter(step, in);
  v_view_of_fused_qkv(step, in);
}

}  // namespace

const Rule kLitgptModulesRule = {
    .name = "litgpt_modules",
    .applies = [](const ActivationInputs& in) { return in.litgpt; },
    .saved = litgpt_layer,
};

}  // namespace memest::detail
