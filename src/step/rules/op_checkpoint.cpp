// Per-op selective checkpointing (--recompute op: torchtitan's selective_ac_option "op";
// docs/techniques.md): each checkpointed layer caches, besides its input, every other mm's
// output and the attention kernel's outputs (Scope::checkpoint tensors after the layer input).
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <string_view>
#include <vector>

namespace memest::detail {
namespace {

// One linear layer's output as torchtitan's policy sees it: an aten.mm (no bias).
struct Mm {
  std::string_view name;
  Shape shape;
};

// The matmuls of a Llama-style layer in forward order (torchtitan's Attention and FeedForward:
// wq, wk, wv, wo, w1, w3, w2; fused projections are one mm each).
std::vector<Mm> layer_mms(const ActivationInputs& in, const Dims& D) {
  std::vector<Mm> mms;
  if (in.fused_qkv) {
    mms.push_back({"fused qkv projection output (cached by op checkpointing)",
                   shape({sym::N, dim("(a+2kv)*d", (in.a + 2 * in.k) * in.d)})});
  } else {
    mms.push_back({"q projection output (cached by op checkpointing)", shape({sym::N, D.a, D.d})});
    mms.push_back({"k projection output", shape({sym::N, D.k, D.d})});
    mms.push_back({"v projection output (cached by op checkpointing)", shape({sym::N, D.k, D.dv})});
  }
  mms.push_back({"o projection output", shape({sym::N, D.h})});
  if (in.moe_layers == in.L && in.moe_layers > 0) return mms;  // expert matmuls: not modelled
  if (in.gated && in.fused_gate_up) {
    mms.push_back({"fused gate/up projection output (cached by op checkpointing)",
                   shape({dim("2", 2), sym::N, D.I})});
  } else if (in.gated) {
    mms.push_back({"gate projection output (cached by op checkpointing)", shape({sym::N, D.I})});
    mms.push_back({"up projection output", shape({sym::N, D.I})});
  } else {
    mms.push_back({"MLP up projection output (cached by op checkpointing)", shape({sym::N, D.I})});
  }
  mms.push_back({"down projection output (cached by op checkpointing)", shape({sym::N, D.h})});
  return mms;
}

std::vector<Tensor> op_cached_tensors(const ActivationInputs& in) {
  const Dims D(in);
  std::vector<Tensor> out;
  const auto cached = [&](std::string_view name, std::uint64_t width, const Shape& sh) {
    out.push_back(make_tensor(name, Part::activations, Scope::checkpoint, Slot::extra, width, sh));
  };
  if (in.graph == LayerGraph::llama) {  // GPT-2-style linears have a bias: aten.addmm, not mm
    const std::vector<Mm> mms = layer_mms(in, D);
    for (std::size_t i = 0; i < mms.size(); i += 2) cached(mms[i].name, in.ec, mms[i].shape);
  }
  if (in.attention == Attention::eager) return out;  // bmm and softmax: recomputed
  cached("attention kernel output (cached by op checkpointing)", in.ec, shape({sym::N, D.a, D.dv}));
  cached("attention kernel log-sum-exp (fp32, cached)", 4,
         shape({sym::b, D.a, in.attention == Attention::flash ? sym::s : sym::s32}));
  return out;
}

// The cached outputs follow the layer input full recompute keeps.
void add_op_cached(Step& step, const ActivationInputs& in) {
  std::size_t at = find_tensor(step, [](const Tensor& t) { return t.scope == Scope::checkpoint; });
  if (at == step.tensors.size()) return;
  for (const Tensor& t : op_cached_tensors(in)) insert_tensor(step, ++at, t);
}

}  // namespace

const Rule kOpCheckpointRule = {
    .name = "op_checkpoint",
    .applies = [](const ActivationInputs& in) { return in.recompute == Recompute::op; },
    .saved = add_op_cached,
};

}  // namespace memest::detail
