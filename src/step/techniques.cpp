// Techniques users turn on that change what a step saves and where it lives
// (docs/techniques.md): per-op selective checkpointing (torchtitan), torch.compile (Inductor's
// partitioner, as a stated approximation), activation offloading (torchtune) and the sizes the
// optimizer step in backward works with (torchtune optimizer_in_bwd).
#include "step/techniques.hpp"

#include "model/model_state.hpp"
#include "step/step_build.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace memest::detail {
namespace {

void cached(Step& st, std::string_view name, std::uint64_t width, const Shape& sh) {
  add_tensor(st, name, Part::activations, Scope::checkpoint, Slot::extra, width, sh);
}

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

// The saved tensors a compiled layer no longer keeps (torch/_functorch/partitioners.py,
// min_cut_rematerialization_partition): pointwise results whose backward users are all fusible
// are recomputed inside the backward kernels. A result a matmul reads in backward (a norm's
// output, gate x up) is materialized there, so its recomputation is banned and it stays saved.
constexpr std::array<std::string_view, 5> kRecomputedByCompile = {
    "input RMSNorm: output cast back",  // x * rstd before the weight: read by the weight's grad
    "post-attention RMSNorm: output cast back",
    "extra norms: output cast back",
    "q and k norms: output cast back",
    "activation output",  // act(gate): read by the product's backward only
};
// RMSNorm's fp32 copy of its input: a compiled layer keeps the input itself.
constexpr std::array<std::string_view, 4> kUpcastInputs = {
    "input RMSNorm: fp32 input (pow, mul)", "post-attention RMSNorm: fp32 input",
    "extra norms: fp32 input", "q and k norms: fp32 input"};

bool in_layer(const Tensor& t) {
  return t.scope == Scope::layer || t.scope == Scope::dense_mlp || t.scope == Scope::moe_mlp;
}

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

void add_op_cached_tensors(Step& step, const ActivationInputs& in) {
  const Dims D(in);
  if (in.graph == LayerGraph::llama) {  // GPT-2-style linears have a bias: aten.addmm, not mm
    const std::vector<Mm> mms = layer_mms(in, D);
    for (std::size_t i = 0; i < mms.size(); i += 2) cached(step, mms[i].name, in.ec, mms[i].shape);
  }
  if (in.attention == Attention::eager) return;  // bmm and softmax: recomputed
  cached(step, "attention kernel output (cached by op checkpointing)", in.ec,
         shape({sym::N, D.a, D.dv}));
  cached(step, "attention kernel log-sum-exp (fp32, cached)", 4,
         shape({sym::b, D.a, in.attention == Attention::flash ? sym::s : sym::s32}));
}

void apply_compile(Step& step, const ActivationInputs& in) {
  for (Tensor& t : step.tensors) {
    if (t.part != Part::activations || !in_layer(t)) continue;
    if (listed(kRecomputedByCompile, t.name)) {
      t.part = Part::other;  // not saved: recomputed inside the backward kernels
      t.scope = Scope::transient;
    } else if (listed(kUpcastInputs, t.name) && t.width != in.ex) {
      t.width = in.ex;
      t.bytes = Poly{};
      t.bytes.add(t.shape.elements(), in.ex);
    }
  }
}

bool offloadable(const Tensor& t) {
  if (t.part != Part::activations) return false;
  if (t.bytes.constant() && t.bytes.c[0] < kMinOffloadBytes) return false;
  // The head's saved tensors stay, except the final norm's (inside the model's forward).
  if (t.scope == Scope::head) return t.name.starts_with("final ");
  return true;
}

std::vector<Entry> offload_stash(const Step& step, const ActivationInputs& in) {
  const Basis x = basis_at(in.b ? in.b : 1, in.s ? in.s : 1024);
  const bool ck = checkpointed(in.recompute);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> sizes;  // (bytes, tensor)
  for (const Entry& e : step.saved) {
    const Tensor& t = step.tensors[e.tensor];
    const bool per_layer = ck ? t.scope == Scope::checkpoint : in_layer(t);
    if (per_layer && offloadable(t) && t.exists_at(x)) sizes.emplace_back(t.bytes.at(x), e.tensor);
  }
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // kOffloadStash consecutive saved tensors hold one tensor of a layer at most
  // ceil(kOffloadStash / m) times, m the tensors a layer offloads (5 layer inputs under full
  // checkpointing, one copy each of the 5 largest when a layer saves 5 or more).
  std::vector<Entry> out;
  if (sizes.empty()) return out;
  std::uint64_t left = kOffloadStash;
  const std::uint64_t m = sizes.size();
  const std::uint64_t per_tensor = std::min<std::uint64_t>(in.L, (kOffloadStash + m - 1) / m);
  for (const auto& [bytes, id] : sizes) {
    if (left == 0) break;
    const std::uint64_t n = std::min<std::uint64_t>(per_tensor, left);
    out.push_back({id, 1, n});
    left -= n;
  }
  return out;
}

LargestTensors largest_tensors(const ParameterSums& lay) {
  LargestTensors out;
  bool seen_block = false;
  for (const TensorGroup& g : lay.inventory->groups) {
    if (g.quant_state) continue;
    const bool layer = lay.per_layer(g);
    seen_block = seen_block || layer;
    if (!g.trainable) continue;
    const std::uint64_t n = g.tensor_elements();
    std::uint64_t& slot = layer ? out.layer : seen_block ? out.head : out.embed;
    slot = std::max(slot, n);
  }
  return out;
}

}  // namespace memest::detail
