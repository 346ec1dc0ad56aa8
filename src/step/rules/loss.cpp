// The loss (docs/activations.md, "The loss"): what each --loss keeps for backward, holds at the
// loss in forward and at the start of backward, one row per tensor.
//
// Sources: transformers' LlamaForCausalLM (hf; before 4.45 the fp32 logits it returns and their
// shifted copy, hf-upcast), Megatron's vocab-parallel cross-entropy (the fp32 softmax, in
// place), torchtune's CEWithChunkedOutputLoss with TransformerDecoder.chunked_output (chunked;
// compiled with training.compile_loss, @1814feb17) and LitGPT's chunked_cross_entropy with
// lm_head_chunk_size (chunked-tokens, lit_gpt/utils.py and lit_gpt/lora.py @8641822, whose
// finetune/lora.py keeps the logits through fabric.backward). With --output-fp32 the logits
// the loss reads are fp32 whatever the model computed them in: Lightning Fabric's
// _FabricModule.forward returns precision.convert_output(output), and the half-precision
// plugins cast every floating output to torch.get_default_dtype() (src/lightning/fabric/
// wrappers.py and plugins/precision/half.py @2.1.0.rc0, the same from 1.9 to 2.6).
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <memest/units.hpp>

#include <algorithm>
#include <array>

namespace memest::detail {
namespace {

// When a loss tensor lives: saved for backward (the head's scope; released by the loss's
// backward), at the loss in forward, at the start of backward, or from the loss through every
// layer's backward (LitGPT's loop keeps the logits).
enum class LossLife : std::uint8_t { saved, forward_end, backward_start, through_backward };

// Bytes per element: fp32, the logits' dtype (the activation dtype, or fp32 when the loop gets
// the output cast to fp32), fp32 under autocast and the logits' dtype otherwise, int64.
enum class LossWidth : std::uint8_t { fp32, logits, autocast_fp32, int64 };

// The size: tokens x vocabulary, a row's (tokens), one of torchtune's chunks (tokens x
// V/chunks), two of them, two of LitGPT's chunks (2 x b x c x V), the labels (with their
// padding at batch 1: s+1 positions), the padded labels (b x (s+1)), a scalar.
enum class LossShape : std::uint8_t {
  tokens_vocab,
  tokens,
  chunk,
  two_chunks,
  two_position_chunks,
  padded_positions,
  padded_labels,
  scalar
};

// Whether a row exists besides its loss kind: always, when the logits are not fp32, under
// torch.compile, without it, or without it and with non-fp32 logits.
enum class LossWhen : std::uint8_t { always, half_logits, compiled, eager, eager_half_logits };

struct LossRow {
  Loss loss;
  LossLife life;
  std::string_view name;
  LossWidth width;
  LossShape shape;
  LossWhen when = LossWhen::always;
  Slot slot = Slot::none;
  Batch batch = Batch::any;
};

// The rows of each loss, in the order a moment lists them. Backward runs every chunk's loss
// nodes before any lm_head chunk's, so one chunk's gradients are live at the start of backward.
constexpr std::array<LossRow, 22> kLossRows = {{
    {Loss::hf, LossLife::saved, "log_softmax(logits.float()) (fp32 N x V)", LossWidth::fp32,
     LossShape::tokens_vocab, LossWhen::always, Slot::log_probs},
    {Loss::hf, LossLife::forward_end, "logits", LossWidth::logits, LossShape::tokens_vocab,
     LossWhen::half_logits},
    {Loss::hf, LossLife::forward_end, "logits.float()", LossWidth::fp32, LossShape::tokens_vocab},
    {Loss::hf, LossLife::backward_start, "gradient of the log-probs (fp32)", LossWidth::fp32,
     LossShape::tokens_vocab},
    {Loss::hf, LossLife::backward_start, "gradient of the logits (fp32)", LossWidth::fp32,
     LossShape::tokens_vocab},
    // transformers before 4.45 returns logits.float() and computes the loss on a shifted copy.
    {Loss::hf_upcast, LossLife::saved, "log_softmax of the shifted fp32 logits (fp32 N x V)",
     LossWidth::fp32, LossShape::tokens_vocab, LossWhen::always, Slot::log_probs},
    {Loss::hf_upcast, LossLife::forward_end,
     "logits (fp32: logits.float() in forward, the model's output)", LossWidth::fp32,
     LossShape::tokens_vocab},
    {Loss::hf_upcast, LossLife::forward_end, "shifted logits (fp32, .contiguous() copy)",
     LossWidth::fp32, LossShape::tokens_vocab},
    {Loss::hf_upcast, LossLife::backward_start, "gradient of the log-probs (fp32)", LossWidth::fp32,
     LossShape::tokens_vocab},
    {Loss::hf_upcast, LossLife::backward_start, "gradient of the logits (fp32)", LossWidth::fp32,
     LossShape::tokens_vocab},
    // Megatron turns its fp32 copy of the logits into the saved softmax in place, and writes the
    // gradient over it, then casts it.
    {Loss::vocab_parallel, LossLife::saved,
     "softmax: exp of the fp32 logits, in place (fp32 N x V)", LossWidth::fp32,
     LossShape::tokens_vocab, LossWhen::always, Slot::log_probs},
    {Loss::vocab_parallel, LossLife::forward_end, "logits", LossWidth::logits,
     LossShape::tokens_vocab, LossWhen::half_logits},
    {Loss::vocab_parallel, LossLife::backward_start,
     "gradient of the logits (cast from the fp32 softmax)", LossWidth::logits,
     LossShape::tokens_vocab},
    // torchtune upcasts one chunk at a time and deletes the chunks' logits before backward; its
    // compiled loss recomputes the upcast and log-softmax from the chunks it keeps.
    {Loss::chunked, LossLife::saved, "log-sum-exp of each row (fp32, compiled loss)",
     LossWidth::fp32, LossShape::tokens, LossWhen::compiled, Slot::log_probs},
    {Loss::chunked, LossLife::saved,
     "log_softmax of each chunk's fp32 upcast (all chunks: fp32 N x V)", LossWidth::fp32,
     LossShape::tokens_vocab, LossWhen::eager, Slot::log_probs},
    {Loss::chunked, LossLife::saved,
     "each chunk's logits, kept by the compiled loss (all chunks: N x V)", LossWidth::logits,
     LossShape::tokens_vocab, LossWhen::compiled, Slot::log_probs},
    {Loss::chunked, LossLife::forward_end, "logits", LossWidth::logits, LossShape::tokens_vocab,
     LossWhen::eager_half_logits},
    {Loss::chunked, LossLife::forward_end, "the last chunk's fp32 upcast (logits.float())",
     LossWidth::fp32, LossShape::chunk, LossWhen::eager_half_logits},
    {Loss::chunked, LossLife::backward_start, "gradient of one chunk's logits (compiled loss)",
     LossWidth::logits, LossShape::chunk, LossWhen::compiled},
    {Loss::chunked, LossLife::backward_start,
     "gradients of one chunk's log-probs and logits (fp32)", LossWidth::fp32, LossShape::two_chunks,
     LossWhen::eager},
    // LitGPT: cross_entropy on each chunk of positions as it is (fp32 under autocast).
    {Loss::chunked_tokens, LossLife::saved,
     "log_softmax of each chunk in the logits' dtype (all chunks: N x V)", LossWidth::autocast_fp32,
     LossShape::tokens_vocab, LossWhen::always, Slot::log_probs},
    {Loss::chunked_tokens, LossLife::backward_start,
     "gradients of one chunk's log-probs and logits", LossWidth::autocast_fp32,
     LossShape::two_position_chunks},
}};

// The row of LitGPT's LossWidth::logits, which its training loop keeps through backward.
constexpr LossRow kLoopLogits = {Loss::chunked_tokens, LossLife::through_backward,
                                 "logits (chunks kept by the training loop)", LossWidth::logits,
                                 LossShape::tokens_vocab};

// Every loss (their `loss` is not read): the target (the labels; at batch 1 the padded labels
// themselves) and total_weight, released by the loss's backward, and the padded labels at the loss.
constexpr std::array<LossRow, 4> kEveryLoss = {{
    {Loss::hf, LossLife::saved, "loss target (int64 labels)", LossWidth::int64, LossShape::tokens,
     LossWhen::always, Slot::target, Batch::many},
    {Loss::hf, LossLife::saved, "loss target (the padded int64 labels at batch 1)",
     LossWidth::int64, LossShape::padded_positions, LossWhen::always, Slot::target, Batch::one},
    {Loss::hf, LossLife::saved, "total_weight (0-d fp32)", LossWidth::fp32, LossShape::scalar,
     LossWhen::always, Slot::target},
    {Loss::hf, LossLife::forward_end, "padded labels (int64)", LossWidth::int64,
     LossShape::padded_labels, LossWhen::always, Slot::none, Batch::many},
}};

// The logits as the loss reads them: in the activation dtype, or cast to fp32 by the loop's
// framework (Lightning Fabric's convert_output, --output-fp32), the lm_head's own output then
// freed.
std::uint64_t loss_logits_width(const ActivationInputs& in) { return in.output_fp32 ? 4 : in.ec; }

bool row_exists(LossWhen when, const ActivationInputs& in) {
  const bool half = loss_logits_width(in) != 4;
  switch (when) {
    case LossWhen::always:
      return true;
    case LossWhen::half_logits:
      return half;
    case LossWhen::compiled:
      return in.compile;
    case LossWhen::eager:
      return !in.compile;
    case LossWhen::eager_half_logits:
      return !in.compile && half;
  }
  return false;
}

std::uint64_t row_width(LossWidth w, const ActivationInputs& in) {
  switch (w) {
    case LossWidth::fp32:
      return 4;
    case LossWidth::logits:
      return loss_logits_width(in);
    case LossWidth::autocast_fp32:
      return in.amp ? 4 : loss_logits_width(in);
    case LossWidth::int64:
      return 8;
  }
  return 0;
}

// One of torchtune's chunks has N/chunks x V elements, written N x ceil(V/chunks) so that it
// stays a polynomial in b and s (exact when the chunks divide s and V).
Shape row_shape(LossShape sh, const ActivationInputs& in, const Sym& V) {
  const Sym vchunk = dim("V/chunks", ceil_div(in.V, std::max<std::uint64_t>(1, in.loss_chunk)));
  switch (sh) {
    case LossShape::tokens_vocab:
      return shape({sym::N, V});
    case LossShape::tokens:
      return shape({sym::N});
    case LossShape::chunk:
      return shape({sym::N, vchunk});
    case LossShape::two_chunks:
      return shape({dim("2", 2), sym::N, vchunk});
    case LossShape::two_position_chunks:
      return shape({dim("2", 2), sym::b, dim("c", in.loss_chunk), V});
    case LossShape::padded_positions:
      return shape({sym::s1});
    case LossShape::padded_labels:
      return shape({sym::b, sym::s1});
    case LossShape::scalar:
      return shape({});
  }
  return shape({});
}

// A row's tensor, not yet sized (make_tensor does it where the tensor is created), written
// into `t`, a new Tensor: filled in place, not built on the stack and copied whole (a copy that
// reads back what was just written field by field waits for those stores). `V` is the
// vocabulary as the shapes name it (V/t on a tensor-parallel rank).
void fill_row_tensor(Tensor& t, const LossRow& row, const ActivationInputs& in, const Sym& V) {
  const bool saved_row = row.life == LossLife::saved;
  t.name = row.name;
  t.part = saved_row ? Part::activations : Part::other;
  t.scope = saved_row ? Scope::head : Scope::transient;
  t.slot = row.slot;
  t.width = row_width(row.width, in);
  t.shape = row_shape(row.shape, in, V);
  t.batch = row.batch;
}

Lifetime row_lifetime(LossLife life) {
  switch (life) {
    case LossLife::backward_start:
      return only_at(MomentKind::backward_start);
    case LossLife::through_backward:
      // Not entered at the head's step in backward, as before (a gap: the loop holds them).
      return {MomentKind::forward_end, MomentKind::post_backward,
              bit(MomentKind::head_step_in_backward)};
    default:
      return only_at(MomentKind::forward_end);
  }
}

// The loss keeps nothing when the logits do not require grad: no parameter is trained before
// the loss.
bool loss_keeps(const ActivationInputs& in) {
  const GradFlow& g = in.grads;
  return g.embed || g.layers || g.final_norm || g.head;
}

template <typename F>
void each_loss_row(const ActivationInputs& in, F&& f) {
  for (const LossRow& row : kLossRows) {
    if (row.loss == in.loss && row_exists(row.when, in)) f(row);
  }
  if (in.loss == Loss::chunked_tokens) f(kLoopLogits);
  for (const LossRow& row : kEveryLoss) f(row);
}

void add_loss_saved(Step& step, const ActivationInputs& in) {
  if (!loss_keeps(in)) return;
  const Sym V = Dims(in).V;
  each_loss_row(in, [&](const LossRow& row) {
    if (row.life != LossLife::saved) return;  // fill_row_tensor's fields, built in place
    add_tensor(step, row.name, Part::activations, Scope::head, row.slot, row_width(row.width, in),
               row_shape(row.shape, in, V), row.batch);
  });
}

void add_loss_lived(std::vector<Lived>& out, const ActivationInputs& in) {
  const Sym V = Dims(in).V;
  each_loss_row(in, [&](const LossRow& row) {
    if (row.life == LossLife::saved) return;
    Lived& l = out.emplace_back();
    fill_row_tensor(l.tensor, row, in, V);
    l.life = row_lifetime(row.life);
  });
}

}  // namespace

std::uint64_t output_logits_width(const ActivationInputs& in) {
  return in.loss == Loss::hf_upcast ? 4 : loss_logits_width(in);
}

const Rule kLossRule = {
    .name = "loss",
    .applies = [](const ActivationInputs& in) { return in.lm_head; },
    .saved = add_loss_saved,
    .lived = add_loss_lived,
};

}  // namespace memest::detail
