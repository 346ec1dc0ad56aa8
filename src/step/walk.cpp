// The walk over a training step (docs/activation-derivation.md §4 and docs/activations.md):
// forward through the layers and the head, the loss, backward layer by layer while gradients
// appear, grad copy, the optimizer step with its implementation's temporaries, zero_grad. Each
// moment is the list of tensors live at it; its bytes and composition are their sums. This file
// is the skeleton: which moments a step has, in which order, and what every moment holds.
#include "step/walk.hpp"

#include "model/walked_layers.hpp"

#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/units.hpp>

#include <utility>

namespace memest::detail {
namespace {

// The moments inside a layer: the walk has them at the last and the first layer, the timeline
// at every layer.
bool in_layer(MomentKind kind) {
  switch (kind) {
    case MomentKind::forward_attention:
    case MomentKind::backward_mlp:
    case MomentKind::layer_step_in_backward:
    case MomentKind::backward_attention:
    case MomentKind::post_backward:
      return true;
    default:
      return false;
  }
}

// The in-layer moments the timeline names by their layer. The optimizer step in backward and
// FSDP's post-backward keep the walk's names there (at the last layer, else at the first), as
// the report has always named them.
bool named_by_layer(MomentKind kind) {
  return kind == MomentKind::forward_attention || kind == MomentKind::backward_mlp ||
         kind == MomentKind::backward_attention;
}

}  // namespace

Walker::Walker(Step& step, const RunSpec& run, const ActivationInputs& in,
               const ParameterSums& sums, WalkLists lists)
    : step_(step),
      run_(run),
      in_(in),
      sums_(sums),
      dims_(in),
      tokens_(in.sp ? sym::Nt : sym::N),
      fsdp_(run, sharding_of(run.parallel)),
      residency_(
          [&] {
            // FSDP's no_sync(): the micro-batches of an accumulation reduce nothing, so the
            // gradients stay whole (each unit's flat gradient) between them.
            Sharding sh = sharding_of(run.parallel);
            if (fsdp_.no_sync()) sh.grads = false;
            return sh;
          }(),
          in),
      writer_(step, residency_),
      in_backward_(run),
      lists_(std::move(lists)) {}

// Begins a moment of kind `kind` (at layer j for an in-layer one). A forward or backward moment
// holds the parameters gathered for it and the other micro-batches' saved tensors.
void Walker::begin(MomentKind kind, u64 j) {
  MomentId id{kind, LayerAt::none};
  std::int32_t layer = -1;
  if (in_layer(kind) && timeline_ && named_by_layer(kind)) {
    id.at = LayerAt::each;
    layer = static_cast<std::int32_t>(j);
  } else if (in_layer(kind)) {
    id.at = j == in_.L - 1 ? LayerAt::last : LayerAt::first;
  }
  writer_.begin(id, layer);
  const Phase phase = phase_of(kind);
  if (phase != Phase::forward && phase != Phase::backward) return;
  if (fsdp_.on()) {
    fsdp_.gathered(writer_, in_.L);
  } else if (residency_.sharding().params) {
    writer_.add(state_.gathered_layers);
  }
  // A pipeline stage holds the saved tensors of the (micro-batch, chunk) pairs it has run forward
  // and not yet backward (docs/parallelism.md): all but the current one are whole.
  // The embeddings' and the head's saved tensors only in the pairs of the chunk that has them.
  const HeldChunks& h = in_.held;
  const auto copies = [&](Scope s) {
    return s == Scope::embed ? h.with_embedding : s == Scope::head ? h.with_head : h.chunks;
  };
  if (h.chunks == 0) return;
  writer_.saved_tensors([&] {
    for (const Entry& e : step_.saved)
      writer_.add(e.tensor, checked_mul(e.count, copies(step_.tensors[e.tensor].scope)));
  });
}

// What exists when the step starts (§2.2). The optimizer states exist in a steady step, and in
// the first from the optimizer phase on (torch.optim creates them lazily in step()); the
// gradients as `grads` says.
void Walker::baseline(AllGrads grads) {
  enter_lived(Anchor::state);
  // Phase's order: optimizer, master_copy and zero_grad come last.
  const bool states =
      step_of_ == StepOf::steady || phase_of(writer_.current().kind) >= Phase::optimizer;
  const bool all = grads == AllGrads::when_kept         ? grads_live()
                   : grads == AllGrads::at_backward_end ? !in_backward_.on()
                                                        : false;
  block(baseline_blocks_[(states ? 2U : 0U) + (all ? 1U : 0U)], 0, 0, [&] {
    writer_.add(state_.params);
    writer_.add(state_.master);
    if (states) writer_.add_kept(state_.optimizer_states);
    writer_.add(state_.grad_accum);
    writer_.add(state_.input_ids);
    writer_.add(state_.buffers);
    writer_.add(state_.ddp_buckets);
    if (all) writer_.add(state_.grads);
  });
}

// The rules' tensors live at the moment being written, at `anchor`: one tensor for its whole
// life, or a new one at each moment. Without `loss_backward`, not those that live at the loss's
// backward only (its gradients, gone once the loss's nodes have run).
void Walker::enter_lived_now(Anchor anchor, bool loss_backward) {
  const MomentKind kind = writer_.current().kind;
  for (std::size_t i = 0; i < lists_.lived.size(); ++i) {
    const Lived& l = lists_.lived[i];
    if (l.anchor != anchor || !l.life.live_at(kind, step_of_)) continue;
    if (!loss_backward && l.life.from == MomentKind::backward_start &&
        l.life.to == MomentKind::backward_start)
      continue;
    if (l.identity == Identity::one) {
      writer_.add(lists_.lived_ids[i]);
      continue;
    }
    writer_.add(add_tensor(step_, l.tensor));
  }
}

// Everything the forward pass saved, and what the device still holds of what it offloaded.
void Walker::enter_saved() {
  writer_.saved_tensors([&] {
    for (const Entry& e : step_.saved) writer_.add(e.tensor, e.count);
  });
  stash();
}

// The same without the tensors of slot `slot` (released by the op being run).
void Walker::enter_saved_except(Slot slot) {
  writer_.saved_tensors([&] {
    for (const Entry& e : step_.saved) {
      if (step_.tensors[e.tensor].slot != slot) writer_.add(e.tensor, e.count);
    }
  });
  stash();
}

void Walker::stash() {
  for (const Entry& e : lists_.stash) writer_.add(e.tensor, e.count);
}

// The saved tensors of layers [first, first + count). Each moment of a layer holds those of the
// layers below it and of its own: while every entry is whole on the device, each is written
// once, then copied.
void Walker::layers(u64 first, u64 count) {
  block(layers_blocks_[first == 0 ? 0 : 1], first, count,
        [&] { layers(first, count, [](Slot) { return false; }); });
}

void Walker::scoped(Scope s, u64 count) {
  for (const std::uint32_t i : by_scope(s)) writer_.add(i, count);
}

void Walker::embed_and_shared() {
  block(embed_and_shared_block_, 0, 0, [&] {
    writer_.saved_tensors([&] {
      scoped(Scope::embed);
      scoped(Scope::shared);
    });
  });
}

void Walker::layer_copies(u64 count) {
  writer_.add(copies_.down, count);
  writer_.add(copies_.other_mlp, count);
  writer_.add(copies_.o_proj, count);
  writer_.add(copies_.qkv, count);
}

// The current layer's copies once down_proj's backward has released its own.
void Walker::layer_copies_but_down() {
  writer_.add(copies_.other_mlp);
  writer_.add(copies_.o_proj);
  writer_.add(copies_.qkv);
}

void Walker::walk(StepOf which) {
  writer_.into(which == StepOf::steady ? step_.steady : step_.first);
  step_of_ = which;
  forward_end();
  forward_attention(in_.L - 1);
  backward_start();
  backward_end();
  backward_layer(in_.L - 1);
  if (in_.L > 1) backward_layer(0);
  after_backward();
}

void Walker::timeline() {
  writer_.into(step_.timeline);
  timeline_ = true;
  step_of_ = StepOf::steady;
  for (u64 j = 0; j < in_.L; ++j) forward_attention(j);
  forward_end();
  backward_start();
  for (u64 j = in_.L; j-- > 0;) backward_layer(j);
  backward_end();
  after_backward();
  timeline_ = false;
}

// At nll_loss: everything saved, the logits, the padded labels, the loss (§4.1).
void Walker::forward_end() {
  begin(MomentKind::forward_end);
  baseline(AllGrads::when_kept);
  enter_saved();
  if (in_.amp) {
    writer_.add(constant("autocast weight cache (every matmul weight and bias)", Part::param_casts,
                         in_.ew * (sums_.autocast_weights + sums_.matmul_biases) +
                             (in_.tied && in_.lm_head ? in_.ew * in_.V * in_.h : 0)));
    writer_.add(temp("final norm output (fp32, referenced by forward)", Part::other, 4,
                     shape({sym::N, dims_.h})));
  }
  enter_lived(Anchor::loss);
  if (in_.lm_head) writer_.add(scalars_.loss);
  writer_.add(scalars_.rng_states);
  writer_.end();
}

// After NllLossBackward0, while LogSoftmaxBackward0 allocates grad_logits (§4.2).
void Walker::backward_start() {
  begin(MomentKind::backward_start);
  baseline(AllGrads::when_kept);
  enter_saved_except(Slot::target);
  writer_.add(
      constant("autocast weight copies saved for backward", Part::param_casts, saved_casts()));
  enter_lived(Anchor::loss);
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  writer_.add(scalars_.rng_states);
  writer_.end();
  head_backward();
  head_step_in_backward();
}

// The autocast weight copies backward reads: the lm_head's, or every layer's without recompute.
u64 Walker::saved_casts() const {
  if (!in_.amp) return 0;
  const u64 lm_head = in_.lm_head ? in_.ew * in_.V * in_.h : 0;
  return checkpointed_layers() ? lm_head
                               : in_.ew * sums_.autocast_weights + (in_.tied ? lm_head : 0);
}

// The lm_head's backward under torchtune's chunked output, an instant of the loss's backward
// (docs/activations.md, "The lm_head's backward in chunks"). TransformerDecoder.chunked_output
// makes one F.linear per chunk before the loss makes any chunk's cross-entropy
// (torchtune/modules/transformer.py @1814feb17), and autograd runs the ready node with the
// highest sequence number first (torch/csrc/autograd/engine.cpp, CompareNodeTaskTime), so every
// chunk's loss runs backward first (releasing the logits it saved, leaving its chunk's logits
// gradient) and then the linears, the last chunk's first. Each linear's weight gradient is added
// into the weight's AccumulateGrad input buffer (torch/csrc/autograd/input_buffer.cpp,
// accumulate), which holds the sum until every chunk's has come: at the second chunk's linear,
// the buffer, that chunk's new weight gradient and the logits gradients of the C-1 chunks whose
// linear has not finished are live.
void Walker::head_backward() {
  const bool weight_grad = in_.tied ? tied_grad() : in_.grads.head;
  const u64 c = in_.loss_chunk;
  if (in_.loss != Loss::chunked || c < 2 || !in_.lm_head || !weight_grad) return;
  begin(MomentKind::backward_start);
  baseline(AllGrads::when_kept);
  writer_.saved_tensors([&] {
    for (const Entry& e : step_.saved) {
      const Slot s = step_.tensors[e.tensor].slot;
      if (s != Slot::target && s != Slot::log_probs) writer_.add(e.tensor, e.count);
    }
  });
  stash();
  writer_.add(
      constant("autocast weight copies saved for backward", Part::param_casts, saved_casts()));
  enter_lived_now(Anchor::loss, false);
  writer_.add(temp("lm_head weight gradient: AccumulateGrad's buffer and this chunk's", Part::grads,
                   in_.amp ? in_.ex : flight_grad_width(), shape({dim("2", 2), dims_.V, dims_.h})));
  writer_.add(temp("logits gradients of the chunks whose lm_head backward has not run", Part::other,
                   in_.ec,
                   shape({dim("chunks-1", c - 1), tokens_, dim("V/chunks", ceil_div(in_.V, c))})));
  writer_.add(temp("gradients of the lm_head input: this chunk's and the last's", Part::other,
                   in_.ex, shape({dim("2", 2), tokens_, dim("h/chunks", ceil_div(in_.h, c))})));
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  writer_.add(scalars_.rng_states);
  writer_.end();
}

// The embedding's backward, when every gradient exists.
void Walker::backward_end() {
  begin(MomentKind::backward_end);
  baseline(AllGrads::at_backward_end);
  if (tied_grad() && in_.lm_head) {
    // The tied weight's gradient arrives twice (AccumulateGrad's buffer, then the embedding's
    // zeros-initialised grad) and is summed out of place.
    writer_.add(temp("tied embedding gradient: lm_head's and the embedding's", Part::other,
                     width(run_.precision.grad),
                     shape({dim("2", 2), dim("V", in_.V), dim("h", in_.h)})));
  } else {
    writer_.add(
        temp("gradient of the embedding output", Part::other, in_.ex, shape({tokens_, dims_.h})));
  }
  writer_.add(scalars_.loss);
  writer_.add(scalars_.backward_seed);
  writer_.add(scalars_.rng_states);
  writer_.end();
  embedding_step_in_backward();
}

// grad_copy (master weights with lower-precision grads), the optimizer step, master_copy and
// zero_grad (§4.3-4.5). The optimizer creates its states lazily on the first step, before its
// update loop.
void Walker::after_backward() {
  if (in_backward_.on()) return;  // every parameter was stepped in backward; no gradient is left
  if (master_grads_) grad_copy();
  const std::uint32_t handle =
      constant("record_function handle", Part::other, in_.cuda ? 0 : kRecordFunctionBytes);
  begin(MomentKind::optimizer);
  baseline(AllGrads::no);
  writer_.add(state_.optimizer_grads);
  const std::uint32_t temporaries =
      sized_later(optimizer_.temporaries_name, Part::other, optimizer_.temporaries);
  step_.step_temporaries.push_back(temporaries);
  writer_.add_kept(temporaries);
  writer_.end();
  begin(MomentKind::optimizer);
  baseline(AllGrads::no);
  writer_.add(state_.optimizer_grads);
  writer_.add(handle);
  writer_.end();
  if (run_.precision.master) {
    begin(MomentKind::master_copy);
    baseline(AllGrads::no);
    writer_.add(state_.optimizer_grads);
    writer_.end();
  }
  begin(MomentKind::zero_grad);
  baseline(AllGrads::no);
  writer_.add(state_.optimizer_grads);
  writer_.add(handle);
  writer_.end();
}

// m.grad = p.grad.float() tensor by tensor: at its worst, the master gradients copied so far
// and the half-precision ones not yet released.
void Walker::grad_copy() {
  const auto& p = run_.precision;
  const u64 eg = width(p.grad), em = width(*p.master);
  u64 best = 0, best_pre = 0, best_n = 0;
  walk_order(sums_, [&](u64, u64 n, u64 prefix) {
    if (prefix == 0) return;
    const u64 v = (em - eg) * prefix + eg * n;
    if (v > best) {
      best = v;
      best_pre = prefix;
      best_n = n;
    }
  });
  begin(MomentKind::grad_copy);
  baseline(AllGrads::no);
  writer_.add(constant("master gradients copied so far (m.grad = p.grad.float())",
                       Part::master_grads, em * best_pre));
  writer_.add(constant("gradients not yet released", Part::grads,
                       eg * (sums_.trainable - best_pre + best_n)));
  writer_.end();
}

std::uint32_t Walker::temp(std::string_view name, Part part, u64 width, const Shape& sh,
                           Batch batch) {
  return add_tensor(step_, name, part, Scope::transient, Slot::none, width, sh, batch);
}

// A constant of no bytes is never entered (MomentWriter::add): every one is the walk's one empty
// tensor, created with the first.
std::uint32_t Walker::constant(std::string_view name, Part part, u64 bytes) {
  if (bytes == 0) return empty(name, part, Scope::state);
  return add_constant(step_, name, part, Scope::state, bytes);
}

// A gradient or copy alive inside one op: whole on every rank, even where states are sharded.
std::uint32_t Walker::in_flight(std::string_view name, Part part, u64 bytes) {
  if (bytes == 0) return empty(name, part, Scope::transient);
  return add_constant(step_, name, part, Scope::transient, bytes);
}

std::uint32_t Walker::empty(std::string_view name, Part part, Scope scope) {
  if (empty_ == kNoTensor) empty_ = add_constant(step_, name, part, scope, 0);
  return empty_;
}

// The optimizer's tensors: entered even when empty, and resized by a plan for another optimizer
// (resize_optimizer), so each is a tensor of its own.
std::uint32_t Walker::sized_later(std::string_view name, Part part, u64 bytes) {
  return add_constant(step_, name, part, Scope::state, bytes);
}

namespace {

// Empties a step and keeps its vectors' storage: every other member as a new Step has it.
void clear_keeping_storage(Step& step) {
  Step fresh;
  const auto keep = [](auto& to, auto& from) {
    to = std::move(from);
    to.clear();
  };
  keep(fresh.tensors, step.tensors);
  keep(fresh.entries, step.entries);
  keep(fresh.steady, step.steady);
  keep(fresh.first, step.first);
  keep(fresh.timeline, step.timeline);
  keep(fresh.saved, step.saved);
  keep(fresh.step_temporaries, step.step_temporaries);
  step = std::move(fresh);
}

}  // namespace

Step build_step(const RunSpec& run, const ActivationInputs& in, const WalkOptions& options) {
  Step step;
  build_step_into(step, run, in, options);
  return step;
}

void build_step_into(Step& step, const RunSpec& run, const ActivationInputs& in,
                     const WalkOptions& options) {
  if (options.timeline) check_walked_layers(in.L, "--plot");
  clear_keeping_storage(step);
  step.tensors.reserve(96);
  step.entries.reserve(options.first_step ? 768 : 384);
  step.steady.reserve(16);
  add_saved_tensors(step, in);
  ParameterSums sums = parameter_sums(run, in);
  // FSDP's gradients and optimizer states are shards of padded flat (or dim-0) parameters.
  const Sharding sh = sharding_of(run.parallel);
  if (run.parallel.fsdp_version > 0 && sh.grads)
    sums.trainable = checked_mul(fsdp_shards_of(run).trainable, sh.ranks);
  // The walker's lists kept per thread as the step's vectors are (storage only); a walk that
  // throws, or one inside another, starts from empty lists.
  thread_local WalkLists spare;
  Walker w(step, run, in, sums, std::exchange(spare, {}));
  w.create_tensors(run.model.inventory);
  w.walk(StepOf::steady);
  // The first step is the steady one without the optimizer states before the optimizer phase,
  // unless gradients kept between steps make the walks differ further.
  const bool grads_kept = !run.training.grads_set_to_none && run.training.grad_accum == 1;
  if (options.first_step && grads_kept) w.walk(StepOf::first);
  if (options.timeline) w.timeline();
  spare = w.release_lists();
}

}  // namespace memest::detail
