// A layer's backward (§4.2): the MLP's backward, the optimizer step in backward as its gradient
// appears, the attention's backward (the softmax's, or the SDPA/flash kernel's), FSDP's
// post-backward. Each moment starts from what the layer's backward holds (layer_backward_base).
#include "step/walk.hpp"

#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {

void Walker::backward_layer(u64 j) {
  backward_mlp(j);
  layer_step_in_backward(j);
  backward_attention(j);
  fsdp_.post_backward(step_, writer_, [&] {
    begin(MomentKind::post_backward, j);
    layer_backward_base(j);
  });
}

// What layer j's backward starts with, without the current layer's own tensors and copies.
void Walker::layer_backward_base(u64 j) {
  baseline(AllGrads::when_kept);
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  embed_and_shared();
  if (checkpointed_layers()) {
    writer_.add(scalars_.rng_states);
    // The inputs of layers 0..j (layer j's brought back); under per-op checkpointing the
    // outputs layers below j cached (layer j's are its recomputation's saved tensors).
    for (const std::uint32_t i : by_scope(Scope::checkpoint)) {
      writer_.saved_tensors([&] { writer_.add(i, j); });
      if (step_.tensors[i].slot == Slot::none) writer_.add(i);
    }
    if (llama() && in_.ex == 2) {  // the recompute saves a new copy of the layer input
      writer_.add(temp("layer input re-saved by the recompute", Part::activations, in_.ex,
                       shape({sym::N, dim("h", in_.h)})));
    }
  } else {
    writer_.saved_tensors([&] { layers(0, j); });
    layer_copies(j);
  }
  gradients_of_layers_above(j);
  enter_lived(Anchor::loss);
  writer_.add(scalars_.output_gradient);
}

// Gradients autograd computes inside a layer's backward: in FSDP's param_dtype.
u64 Walker::flight_grad_width() const {
  return fsdp_.on() ? fsdp_.unsharded_width() : width(run_.precision.grad);
}

// MulBackward0 of act(gate) x up (Llama), or c_proj's AddmmBackward and the first
// activation-backward op (GPT-2); down_proj's autocast copy is released first.
void Walker::backward_mlp(u64 j) {
  const std::uint32_t down_grad =
      in_flight("gradient of the down projection weight", Part::grads,
                in_backward_.unstepped(flight_grad_width() * sums_.down_trainable));
  if (llama()) {
    llama_mlp_backward(j, down_grad);
  } else {
    gpt2_mlp_backward(j, down_grad);
  }
}

// The MLP's width as a layer's backward sees it: I, or under MoE top_k x I_moe per token.
namespace {
struct MlpShape {
  Sym width;
  Shape tokens_width;
  bool all_moe = false;
};
MlpShape mlp_shape(const ActivationInputs& in, const Dims& dims) {
  const bool all_moe = in.moe_layers == in.L && in.moe_layers;
  const Sym I = all_moe ? dims.Imoe : dims.I;
  if (all_moe && in.moe_a2a)
    return {I, routed_rows(in, I, in.t > 1 ? "k*c*I_moe/t" : "k*c*I_moe"), all_moe};
  return {I, all_moe ? shape({sym::N, dim("top_k", in.topk), I}) : shape({sym::N, I}), all_moe};
}
}  // namespace

void Walker::llama_mlp_backward(u64 j, std::uint32_t down_grad) {
  const MlpShape m = mlp_shape(in_, dims_);
  const auto current = [&] {
    layer_backward_base(j);
    layers(j, 1);
    layer_copies_but_down();
  };
  begin(MomentKind::backward_mlp, j);
  current();
  writer_.add(down_grad);
  Shape two = m.tokens_width;
  std::copy_backward(two.factors.begin(), two.factors.begin() + two.rank,
                     two.factors.begin() + two.rank + 1);
  two.factors[0] = dim("2", 2);
  ++two.rank;
  writer_.add(temp("gradients of act(gate) and of up (MulBackward0)", Part::other, in_.ec, two));
  writer_.end();
  if (in_.moe_layers > 0 && in_.moe_torchtitan) torchtitan_combine_backward(j);
  if (in_.moe_layers > 0 && in_.moe_allgather) {
    allgather_backward(j);
  } else if (in_.moe_layers > 0 && in_.moe_a2a && (!in_.moe_torchtitan || in_.ep > 1)) {
    // The combine's all-to-all in backward (the dispatch's is the same pair reversed): the
    // gradients of this rank's N x top_k routed copies sent, and of the rows its experts got;
    // with dense layers too, beside the layer the walk carries (the larger kind).
    begin(MomentKind::backward_mlp, j);
    current();
    const Sym h = dim("h", in_.h);
    writer_.add(temp("MoE all-to-all: gradients of the routed tokens (send buffer)", Part::other,
                     in_.ec, shape({in_.sp ? sym::Nt : sym::N, dims_.topk, h})));
    writer_.add(temp("MoE all-to-all: gradients of the rows received (receive buffer)", Part::other,
                     in_.ec, routed_rows(in_, h, "k*c*h")));
    writer_.end();
  }
  if (!in_.grads.nf4 || m.all_moe) return;
  // QLoRA: the 4-bit down_proj dequantises its weight again for the input gradient
  // (bitsandbytes MatMul4Bit.backward, torchao's linear_nf4): it lives beside that gradient.
  // In the timeline this alternative has always had no layer: it shows as a moment of its own.
  begin(MomentKind::backward_mlp, j);
  writer_.unindex();
  current();
  writer_.add(temp("dequantized down_proj weight (for the input gradient)", Part::other, in_.ec,
                   shape({dim("h", in_.h), m.width})));
  writer_.add(temp("gradient of the down_proj input", Part::other, in_.ec, m.tokens_width));
  writer_.end();
}

// Megatron-LM's all-gather dispatcher in backward (token_dispatcher.py @ d98e8a64ddf3,
// MoEAllGatherTokenDispatcher): the combine's reduce-scatter over the TP x EP group runs backward
// as an all-gather of the output gradient, N x e tokens, and unpermute's backward picks the rows
// of this rank's experts from it; the dispatch's permute runs backward as an index_add of those
// rows' gradients into N x e zeroed tokens, which its all-gather's backward reduce-scatters. Both
// hold N x e tokens and the rows at once. The probabilities are in the logits' dtype
// (moe_utils.py topk_routing_with_score_function, probs.type_as(logits)), so the combine's
// .to(local_probs.dtype) copies nothing. The gathered tokens of the forward stay in Megatron's
// global memory buffer (gather_from_sequence_parallel_region, use_global_buffer=True), counted
// here only: it lives from the first MoE forward to the end of the run.
void Walker::allgather_backward(u64 j) {
  begin(MomentKind::backward_mlp, j);
  layer_backward_base(j);
  layers(j, 1);
  layer_copies_but_down();
  const Sym h = dim("h", in_.h);
  const Shape gathered = shape({sym::N, dim("e", in_.ep), h});
  if (in_.t > 1 || in_.ep > 1)  // token_dispatch gathers only over more than one rank
    writer_.add(temp("MoE all-gather: gathered tokens (Megatron's global memory buffer)",
                     Part::other, in_.ec, gathered));
  writer_.add(
      temp("MoE all-gather: gradients of the gathered tokens", Part::other, in_.ec, gathered));
  writer_.add(temp("MoE all-gather: gradients of the rows kept", Part::other, in_.ec,
                   routed_rows(in_, h, "k*c*h")));
  writer_.end();
}

// torchtitan's combine in backward (torchtitan @ b5bcd76c6, token_dispatcher.py combine:
// (routed_output.to(float32) * scores).to(dtype)): the cast's backward gives an fp32 gradient of
// the N x top_k routed outputs, and MulBackward0 computes from it the gradients of both factors
// at full size before the scores' is summed to N x top_k: three fp32 N x top_k x h tensors, with
// the layer's saved tensors held. Its all-to-all (EP > 1) is the alltoall's candidate.
void Walker::torchtitan_combine_backward(u64 j) {
  begin(MomentKind::backward_mlp, j);
  layer_backward_base(j);
  layers(j, 1);
  layer_copies_but_down();
  const Shape routed = shape({sym::N, dims_.topk, dim("h", in_.h)});
  writer_.add(
      temp("MoE combine backward: fp32 gradient of the routed outputs", Part::other, 4, routed));
  writer_.add(temp("MoE combine backward: gradient of the routed outputs (MulBackward0)",
                   Part::other, 4, routed));
  writer_.add(temp("MoE combine backward: gradient of the scores before its sum (MulBackward0)",
                   Part::other, 4, routed));
  writer_.end();
}

void Walker::gpt2_mlp_backward(u64 j, std::uint32_t down_grad) {
  const MlpShape m = mlp_shape(in_, dims_);
  const Sym h = dim("h", in_.h);
  begin(MomentKind::backward_mlp, j);
  layer_backward_base(j);
  layers(j, 1, [](Slot s) { return s == Slot::mmask; });
  writer_.add(copies_.down);
  layer_copies_but_down();
  writer_.add(temp("gradient of the MLP output", Part::other, in_.ec, shape({sym::N, h})));
  writer_.add(temp("gradient of the c_proj input", Part::other, in_.ec, m.tokens_width));
  if (in_.amp) {
    writer_.add(in_flight("c_proj weight copy for the input gradient", Part::param_casts,
                          in_.ew * in_.I * in_.h));
  } else {
    writer_.add(down_grad);
  }
  writer_.end();
  begin(MomentKind::backward_mlp, j);
  layer_backward_base(j);
  layers(j, 1, [](Slot s) { return s == Slot::mmask; });
  layer_copies_but_down();
  const u64 two = in_.act == ActFn::gelu_new || in_.act == ActFn::relu ? 2 : 1;
  writer_.add(temp("activation backward temporaries", Part::other, two * in_.ec, m.tokens_width));
  writer_.add(down_grad);
  writer_.end();
}

// What the attention core's backward starts from: layer j's backward after the MLP, the second
// norm and o_proj have released their saved tensors and weight copies (§4.2 M_attn), less
// the saved tensor `also` that this op releases.
void Walker::attention_backward_base(u64 j, Slot also) {
  begin(MomentKind::backward_attention, j);
  layer_backward_base(j);
  layers(j, 1, [&](Slot s) {
    const bool mlp_side =
        s == Slot::mlp || s == Slot::norm2 || s == Slot::mlp_in || s == Slot::o_in;
    const bool gpt2_side = !llama() && (s == Slot::mmask || s == Slot::rmask);
    return mlp_side || gpt2_side || (also != Slot::none && s == also);
  });
  writer_.add(copies_.qkv);
  writer_.add(in_flight("gradients of the MLP, post-attention norm and o_proj weights", Part::grads,
                        in_backward_.unstepped(flight_grad_width() *
                                               (sums_.layer_mlp_trainable + sums_.norm_trainable +
                                                sums_.layer_o_trainable))));
  if (in_.attention == Attention::eager && in_.recompute == Recompute::selective) {
    for (const std::uint32_t i : by_scope(Scope::core)) {
      if (step_.tensors[i].slot != also) writer_.add(i);  // the recomputed core is live again
    }
  }
  if (checkpointed_layers()) {
    writer_.add(temp("gradient of the layer output kept by checkpoint", Part::other, in_.ex,
                     shape({sym::N, dim("h", in_.h)})));
  }
}

// SoftmaxBackward0, or the SDPA/flash kernel's backward (§4.2, §5.2).
void Walker::backward_attention(u64 j) {
  const Sym a = dims_.a, d = dims_.d;
  if (in_.attention == Attention::eager && llama()) {
    llama_softmax_backward(j);
    return;
  }
  if (in_.attention == Attention::eager) {
    gpt2_softmax_backward(j);
    return;
  }
  attention_backward_base(j, Slot::none);
  writer_.add(
      temp("gradients of q, k and v", Part::other, in_.ec, shape({dim("3", 3), sym::N, a, d})));
  if (in_.cp > 1) {
    writer_.add(temp("context-parallel ring: K/V and their gradients in flight", Part::other,
                     in_.ec, shape({dim("4", 4), sym::N, dims_.k, d})));
  }
  writer_.add(
      temp("softmax delta (fp32, one per row)", Part::other, 4, shape({sym::b, a, sym::s})));
  if (in_.attention == Attention::flash)
    writer_.add(temp("dq accumulator (fp32)", Part::other, 4, shape({sym::N, a, d})));
  writer_.end();
}

// Llama: the fp32 grads of the probabilities and the scores (releasing the compute-dtype
// probabilities), or with attention dropout its backward (releasing the dropout output).
void Walker::llama_softmax_backward(u64 j) {
  const Sym a = dims_.a;
  const Shape S2 = shape({sym::b, a, sym::s2});
  const u64 ec = in_.ec;
  const bool cuda = in_.cuda;
  // v's gradient beyond a v saved as a view (MQA at batch 1) or narrower than q (MLA).
  const u64 qd = in_.a * in_.d, vd = in_.a * in_.dv;
  const bool mqa = in_.k == 1;
  const std::uint32_t v_grad = temp("gradient of v beyond the saved v", Part::other, ec,
                                    shape({sym::N, dim("a*d - a*d_v", qd - std::min(qd, vd))}),
                                    mqa ? Batch::many : Batch::any);
  const std::uint32_t v_grad_one =
      temp("gradient of v beyond the saved view (MQA at batch 1)", Part::other, ec,
           shape({sym::N, dim("a*d - d_v", mqa ? qd - std::min(qd, in_.dv) : 0)}), Batch::one);
  const auto finish = [&] {
    writer_.add(v_grad);
    writer_.add(v_grad_one);
    writer_.end();
  };
  if (in_.p_attn > 0) {
    const u64 e_do = in_.ex == 2 && !in_.amp ? 2 : 4;  // the dropout's dtype
    attention_backward_base(j, Slot::dropped);
    writer_.add(temp(cuda ? "dropout backward (fused): mask cast and product"
                          : "dropout backward: mask cast and two products",
                     Part::other, (cuda ? 2 : 3) * e_do, S2));
    writer_.add(constant("dropout backward scalars", Part::other, cuda ? 0 : 8 + e_do));
    finish();
    attention_backward_base(j, Slot::dropped);
    writer_.add(
        temp("softmax backward: grads of the probabilities and the scores", Part::other, 7, S2));
    finish();
    return;
  }
  attention_backward_base(j, Slot::pc);
  writer_.add(temp("softmax backward: grads of the probabilities and the scores (fp32)",
                   Part::other, 4, shape({dim("2", 2), sym::b, a, sym::s2})));
  finish();
}

// GPT-2: softmax backward in the softmax's dtype, or the dropout's backward; at batch 1 the
// v copy stays (q, k and v share one storage).
void Walker::gpt2_softmax_backward(u64 j) {
  const Sym a = dims_.a;
  const Shape S2 = shape({sym::b, a, sym::s2});
  const u64 ec = in_.ec;
  const bool cuda = in_.cuda;
  const u64 e_sm = ec == 4 || (in_.amp && cuda) ? 4 : ec;
  attention_backward_base(j, Slot::none);
  if (in_.p_attn > 0) {
    writer_.add(temp(cuda ? "dropout backward (fused)" : "dropout backward: mask cast and product",
                     Part::other, (cuda ? 1 : 2) * e_sm, S2));
    writer_.add(constant("dropout backward scalars", Part::other, cuda ? 0 : 8 + e_sm));
  } else {
    writer_.add(temp("softmax backward: grads of the probabilities and the scores", Part::other,
                     e_sm, shape({dim("2", 2), sym::b, a, sym::s2})));
  }
  writer_.add(temp("v copy kept (q/k/v share one storage at batch 1)", Part::other, ec,
                   shape({sym::N, dim("h", in_.h)}), Batch::one));
  writer_.end();
}

}  // namespace memest::detail
