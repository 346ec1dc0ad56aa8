// A layer's attention in the forward pass, at its scores (§4.1 forward_attn and S2_live): the
// layers below, what the current layer has saved or holds so far, and the score temporaries of
// eager attention, one alternative per candidate worst instant.
#include "step/walk.hpp"

#include <array>
#include <utility>

namespace memest::detail {
namespace {

// The first norm of the current layer (the only one in a parallel block).
bool first_norm(Slot s, bool has_norm1) { return s == (has_norm1 ? Slot::norm1 : Slot::norm2); }

}  // namespace

// One alternative of the score moment (§4.1 S2_live): temporaries of b*a*s^2 elements (name,
// bytes per element), scalars, and whether the layer's softmax output is live too.
struct Walker::ScoreAlternative {
  std::array<std::pair<std::string_view, std::uint64_t>, 4> temps{};
  std::uint64_t scalars = 0;
  bool softmax = false;
};

// What the current layer's attention holds besides its saved tensors.
void Walker::attention_temporaries() {
  const Sym h = dims_.h, a = dims_.a, d = dims_.d;
  const bool amp = in_.amp;
  attention_.bias_cache =
      constant("autocast bias cache", Part::param_casts, amp ? in_.ew * sums_.matmul_biases : 0);
  attention_.qkv_copies = constant("autocast copies of this layer's q/k/v weights",
                                   Part::param_casts, amp ? in_.ew * sums_.layer_qkv_matmul : 0);
  attention_.norm_fp32 =
      temp("norm output in fp32 (autocast input)", Part::other, 4, shape({sym::N, h}));
  attention_.qkv_fp32 = temp("q, k, v in fp32 (rotary under autocast)", Part::other, 4,
                             shape({dim("3", 3), sym::N, a, d}));
  attention_.rotated_q = temp("rotated q (not saved)", Part::other, in_.ex, shape({sym::N, a, d}));
  attention_.fused_qkv = temp("fused qkv output (held by the q/k/v views)", Part::other, in_.ec,
                              shape({dim("3", 3), sym::N, h}));
}

void Walker::forward_attention(u64 j) {
  if (in_.attention != Attention::eager) {
    attention_prelude(j);
    writer_.end();
    return;
  }
  const Shape S2 = shape({sym::b, dims_.a, sym::s2});
  for (const ScoreAlternative& alt : llama() ? llama_scores() : gpt2_scores()) {
    attention_prelude(j);
    if (alt.softmax) {  // saved, or under selective recompute a transient all the same
      for (const std::uint32_t i : by_scope(Scope::core)) {
        if (step_.tensors[i].slot == Slot::sm) writer_.add(i);
      }
      layers(in_.L - 1, 1, [](Slot s) { return s != Slot::sm; });
    }
    for (const auto& [name, width] : alt.temps) {
      if (width) writer_.add(temp(name, Part::other, width, S2));
    }
    writer_.add(constant("score scalars", Part::other, alt.scalars));
    writer_.end();
  }
}

// The layers below the current one, and what the forward keeps outside the saved tensors.
void Walker::forward_layers_below() {
  baseline(AllGrads::when_kept);
  embed_and_shared();
  if (llama()) {
    if (!checkpointed_layers() && in_.causal && in_.attention == Attention::eager)
      writer_.add(temp("additive causal mask (not saved)", Part::other, in_.ex, shape({sym::s2})));
    writer_.add(temp("position ids (int64)", Part::other, 8, shape({sym::s})));
  }
}

// The tensors of the current layer saved before its attention scores exist.
bool Walker::before_scores(Slot s) const {
  if (first_norm(s, has_norm1_) || s == Slot::q_in || s == Slot::q || s == Slot::k) return true;
  if (in_.attention != Attention::eager) return s == Slot::v || s == Slot::o_in || s == Slot::lse;
  return llama() && (s == Slot::v || s == Slot::scale);
}

// Layer j's attention in the forward pass up to its scores (the walk's is the last layer's): the
// layers below, what the current one has saved or holds (§4.1 forward_attn, rows 1-7 and the
// autocast copies).
void Walker::attention_prelude(u64 j) {
  begin(MomentKind::forward_attention, j);
  forward_layers_below();
  if (checkpointed_layers()) {
    writer_.saved_tensors([&] { scoped(Scope::checkpoint, j + 1); });
    stash();
    writer_.add(scalars_.rng_states);
    layer_copies(j);
    checkpointed_prelude();
    return;
  }
  writer_.saved_tensors([&] { layers(0, j); });
  stash();
  layer_copies(j);
  layers(j, 1, [&](Slot s) { return !before_scores(s); });
  if (in_.sp) {
    writer_.add(temp("all-gathered attention input (sequence parallel)", Part::other, in_.ec,
                     shape({sym::N, dims_.h})));
  }
  if (in_.cp > 1) {
    writer_.add(temp("context-parallel ring: the next K/V block", Part::other, in_.ec,
                     shape({dim("2", 2), sym::N, dims_.k, dims_.d})));
  }
  if (in_.amp) {
    writer_.add(attention_.bias_cache);
    writer_.add(attention_.qkv_copies);
    writer_.add(attention_.norm_fp32);
    if (llama()) writer_.add(attention_.qkv_fp32);
  } else if (llama()) {
    writer_.add(attention_.rotated_q);
  }
  if (!llama() && in_.attention == Attention::eager) {
    writer_.add(attention_.fused_qkv);
    writer_.add(constant("divisor sqrt(d)", Part::other, in_.ec));
    writer_.add(constant("mask_value (0-d fp32)", Part::other, 4));
  }
}

// Under full recompute the layer runs without grad: nothing of it is saved (§4.1, Xck).
void Walker::checkpointed_prelude() {
  const Sym h = dim("h", in_.h);
  const bool kernel = in_.attention != Attention::eager;
  if (!llama() && !kernel) {
    writer_.add(attention_.bias_cache);
    writer_.add(
        temp("ln_1 output (no grad)", Part::other, in_.amp ? 4 : in_.ex, shape({sym::N, h})));
    writer_.add(attention_.fused_qkv);
    return;
  }
  if (in_.amp) {
    writer_.add(attention_.bias_cache);
    if (kernel) writer_.add(attention_.qkv_copies);
    writer_.add(attention_.norm_fp32);
    if (llama()) writer_.add(attention_.qkv_fp32);
  } else if (!kernel) {
    writer_.add(attention_.rotated_q);
  }
  if (kernel || !in_.amp)
    writer_.add(temp("norm output (no grad)", Part::other, in_.ex, shape({sym::N, h})));
  // The last layer's tensors, whichever layer this is: the kernel's inputs and outputs, or
  // eager attention's k and v.
  if (kernel) {
    layers(in_.L - 1, 1, [](Slot s) {
      return !(s == Slot::q || s == Slot::k || s == Slot::v || s == Slot::o_in || s == Slot::lse);
    });
  } else if (!in_.amp) {
    layers(in_.L - 1, 1, [](Slot s) { return !(s == Slot::k || s == Slot::v); });
  }
}

// §4.1 S2_live for Llama's eager attention, without and with full recompute.
std::vector<Walker::ScoreAlternative> Walker::llama_scores() const {
  const u64 ec = in_.ec;
  const bool amp = in_.amp, cuda = in_.cuda, ck = checkpointed_layers();
  std::vector<ScoreAlternative> out;
  const auto one = [&](std::string_view name, u64 width, u64 scalars) {
    ScoreAlternative alt;
    alt.temps[0] = {name, width};
    alt.scalars = scalars;
    out.push_back(alt);
  };
  if (ec == 4) {
    one("scores q@k^T and scores x scale (fp32)", 8, ck ? 12 : 4);
  } else if (ck) {  // in no-grad the fp32 softmax output dies once it is cast
    one("scores and softmax output (no grad)", 4, 10);
    one(amp && cuda ? "scores in fp32 and scores + mask (CUDA autocast)"
                    : "scores, their fp32 copy, scores + mask",
        amp && cuda ? 8 : 10, 0);
  } else if (amp) {
    one(cuda ? "scores in fp32 and scores + mask (CUDA autocast)"
             : "scores (bf16), their fp32 copy, scores + mask (fp32)",
        cuda ? 8 : 10, 0);
  } else {
    one("scores + mask (bf16), fp32 copy, softmax output (fp32)", 10, 0);
  }
  if (in_.p_attn > 0) {
    const bool half = ec != 4 && !amp;
    const u64 w = ck ? (ec == 2 && !amp ? (cuda ? 5 : 7) : (cuda ? 9 : 13))
                     : (half ? (cuda ? 9 : 11) : (cuda ? 9 : 13));
    one(cuda ? "softmax output, dropout mask and output (fused dropout)"
             : "softmax output, dropout mask, its fp32 cast, dropout output",
        w, 0);
  }
  return out;
}

// §4.1 S2_live for GPT-2's eager attention: the scores and their masked copy, or the softmax
// output with the dropout's mask, its CPU cast and its output.
std::vector<Walker::ScoreAlternative> Walker::gpt2_scores() const {
  const u64 e = in_.ec == 4 ? 4 : 2;
  const bool ck = checkpointed_layers();
  std::vector<ScoreAlternative> out(1);
  out[0].temps[0] = {"scores and masked scores", 2 * e};
  if (in_.p_attn > 0) {
    ScoreAlternative alt;
    std::size_t n = 0;
    alt.softmax = !ck;
    if (ck) alt.temps[n++] = {"softmax output", e};
    alt.temps[n++] = {"attention dropout mask (bool)", 1};
    if (!in_.cuda) alt.temps[n++] = {"dropout mask cast", e};
    alt.temps[n] = {"attention dropout output", e};
    out.push_back(alt);
  }
  return out;
}

}  // namespace memest::detail
