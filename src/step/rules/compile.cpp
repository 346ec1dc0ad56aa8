// torch.compile of each layer (--compile; docs/techniques.md), as a stated approximation: the
// saved tensors Inductor's partitioner recomputes instead (pointwise results of saved tensors)
// leave the saved set, and an RMSNorm keeps its input in the model dtype rather than its fp32
// copy. torchtune's compiled chunked loss is a row of the loss's table (loss.cpp).
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <algorithm>
#include <array>

namespace memest::detail {
namespace {

constexpr std::array<NormSite, 4> kLayerNorms = {NormSite::input, NormSite::post_attention,
                                                 NormSite::extra, NormSite::qk};

bool in_layer_scope(const Tensor& t) {
  return t.scope == Scope::layer || t.scope == Scope::dense_mlp || t.scope == Scope::moe_mlp;
}

// The saved tensors a compiled layer no longer keeps (torch/_functorch/partitioners.py,
// min_cut_rematerialization_partition): pointwise results whose backward users are all fusible
// are recomputed inside the backward kernels. A result a matmul reads in backward (a norm's
// output, gate x up) is materialized there, so its recomputation is banned and it stays saved:
// the normed output before the weight (read by the weight's gradient) and act(gate) (read by
// the product's backward only) are recomputed.
bool recomputed_by_compile(std::string_view name) {
  return name == "activation output" ||
         std::any_of(kLayerNorms.begin(), kLayerNorms.end(),
                     [&](NormSite s) { return norm_names(s).output == name; });
}

// RMSNorm's fp32 copy of its input: a compiled layer keeps the input itself.
bool upcast_input(std::string_view name) {
  return std::any_of(kLayerNorms.begin(), kLayerNorms.end(),
                     [&](NormSite s) { return norm_names(s).fp32_input == name; });
}

void compile_layers(Step& step, const ActivationInputs& in) {
  for (Tensor& t : step.tensors) {
    if (t.part != Part::activations || !in_layer_scope(t)) continue;
    if (recomputed_by_compile(t.name)) {
      t.part = Part::other;  // not saved: recomputed inside the backward kernels
      t.scope = Scope::transient;
    } else if (upcast_input(t.name) && t.width != in.ex) {
      t.width = in.ex;
      t = make_tensor(t);
    }
  }
}

}  // namespace

const Rule kCompileRule = {
    .name = "compile",
    .applies = [](const ActivationInputs& in) { return in.compile; },
    .saved = compile_layers,
};

}  // namespace memest::detail
