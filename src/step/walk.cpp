// The walk over a training step (docs/activation-derivation.md §4 and docs/activations.md):
// forward through the layers and the head, the loss, backward layer by layer while gradients
// appear, grad copy, the optimizer step with its implementation's temporaries, zero_grad. Each
// moment is the list of tensors live at it; its bytes and composition are their sums.
#include "model/model_state.hpp"
#include "parallel/fsdp.hpp"
#include "step/step_build.hpp"
#include "step/techniques.hpp"

#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/run_spec.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <array>

namespace memest::detail {
namespace {

using u64 = std::uint64_t;

struct ScoreAlternative;

// Builds the moments of one step as lists of tensors.
class Walker {
 public:
  Walker(Step& step, const RunSpec& run, const ActivationInputs& in, const ParameterSums& lay)
      : st_(step),
        run_(run),
        in_(in),
        lp_(lay),
        sh_(sharding_of(run.parallel)),
        fsdp_(run.parallel.fsdp_version > 0 && (sh_.params || sh_.grads)),
        D_(in),
        T_(in.sp ? sym::Nt : sym::N),
        offload_(run.training.offload_activations),
        in_bwd_(run.training.optimizer_in_backward) {
    // FSDP's no_sync(): the micro-batches of an accumulation reduce nothing, so the gradients
    // stay whole (each unit's flat gradient) between them and no reduce-scatter runs.
    no_sync_ = fsdp_ && sh_.grads && run.parallel.fsdp_no_sync && run.training.grad_accum > 1;
    if (no_sync_) sh_.grads = false;
  }

  void statics(const Inventory& inv0);
  void unsharded_unit_grads(u64 eg, u64& head, u64& layer) const;
  void attention_tensors();
  void walk(bool steady);
  void timeline();

 private:
  Step& st_;
  const RunSpec& run_;
  const ActivationInputs& in_;
  const ParameterSums& lp_;
  Sharding sh_;
  // PyTorch FSDP (src/parallel/fsdp.cpp): the units all-gathered and the gradients being reduced.
  bool fsdp_ = false;
  bool no_sync_ = false;  // FSDP's no_sync(): whole gradients kept across micro-batches
  FsdpShards fs_;
  u64 eu_ = 0, er_ = 0;  // unsharded gradients (param_dtype) and their reduction (reduce_dtype)
  std::uint32_t fsdp_root_ = 0, fsdp_unit_ = 0, fsdp_ag_ = 0, fsdp_rs_held_ = 0;
  Dims D_;
  Sym T_;  // the tokens of the residual stream (N/t under sequence parallelism)
  bool in_optimizer_ = false;
  bool timeline_ = false;  // walking Step::timeline: every layer, moments named without the end
  std::uint32_t gathered_ = 0;
  std::vector<MomentSpec>* out_ = nullptr;
  std::vector<std::uint32_t> layer_ids_;
  std::array<std::vector<std::uint32_t>, kScopeCount> scope_ids_;
  // State tensors.
  std::uint32_t ddp_buckets_ = 0;  // PyTorch DDP's all-reduce buckets: a second gradient copy
  std::uint32_t params_ = 0, master_ = 0, states_ = 0, grad_accum_ = 0, inputs_ = 0, buffers_ = 0,
                grads_ = 0, opt_grads_ = 0, head_grads_ = 0, layer_grads_ = 0;
  // Autocast copies of one layer's weights, split by the backward op that releases them.
  std::uint32_t cast_down_ = 0, cast_mlp_ = 0, cast_o_ = 0, cast_rest_ = 0;
  std::uint32_t loss_ = 0, seed_ = 0, rng_ = 0, grad_out_ = 0;
  // --loop-keeps-output: the model output's logits the training loop holds (held_), from the
  // assignment after forward to the next forward's return; `steady_` and `forward_` say whether
  // the moment being built has the previous step's.
  std::uint32_t held_ = 0;
  bool steady_ = false, forward_ = false;
  // What the current layer's attention holds besides its saved tensors.
  std::uint32_t bias_cache_ = 0, qkv_casts_ = 0, norm32_ = 0, qkv32_ = 0, qrot_ = 0, fused_qkv_ = 0;
  bool copy_grads_ = false;
  OptimizerSizes sizes_;
  // Activation offloading (src/step/techniques.cpp): while `host_side_`, offloadable saved tensors
  // are on the host and not entered; `stash_` is what the device keeps of them in forward.
  bool offload_ = false, host_side_ = false;
  std::vector<Entry> stash_;
  // The optimizer step in backward: one tensor's gradient and step temporaries at a time, and a
  // tied lm_head's gradient waiting in autograd's input buffer for the embedding's.
  bool in_bwd_ = false;
  std::uint32_t tied_buffer_ = 0;
  std::array<std::uint32_t, 3> step_grad_{}, step_temps_{};  // layer, head, embedding

  std::uint32_t constant(std::string_view name, Part part, u64 bytes) {
    return add_tensor(st_, name, part, Scope::state, Slot::none, bytes, shape({}));
  }
  // A gradient or copy alive inside one op: whole on every rank, even where states are sharded.
  std::uint32_t in_flight(std::string_view name, Part part, u64 bytes) {
    return add_tensor(st_, name, part, Scope::transient, Slot::none, bytes, shape({}));
  }
  std::uint32_t temp(std::string_view name, Part part, u64 width, const Shape& sh,
                     Batch batch = Batch::any) {
    return add_tensor(st_, name, part, Scope::transient, Slot::none, width, sh, batch);
  }
  void begin(std::string_view name, std::string_view phase, std::int32_t layer = -1) {
    in_optimizer_ = phase == "optimizer";
    forward_ = phase == "forward";
    out_->push_back({name, phase, static_cast<std::uint32_t>(st_.entries.size()), 0, layer});
    if (phase == "forward" || phase == "backward") {
      if (fsdp_) {
        fsdp_gathered(name);
      } else if (sh_.params) {
        add(gathered_);
      }
      hold_other_microbatches();
    }
  }
  // A pipeline stage holds the saved tensors of the micro-batches it has run forward and not
  // yet backward (docs/parallelism.md): all but the current one are whole.
  void hold_other_microbatches() {
    if (in_.in_flight <= 1) return;
    host([&] {
      for (const Entry& e : st_.saved) add(e.tensor, checked_mul(e.count, in_.in_flight - 1));
    });
  }
  void end() { out_->back().end = static_cast<std::uint32_t>(st_.entries.size()); }
  // Enters what `f` adds with the offloadable saved tensors left on the host.
  template <typename F>
  void host(F&& f) {
    host_side_ = offload_;
    f();
    host_side_ = false;
  }
  void stash() {
    for (const Entry& e : stash_) add(e.tensor, e.count);
  }
  // `keep`: entered even when empty (the optimizer's tensors, which a plan may resize).
  void add(std::uint32_t t, u64 count = 1, bool keep = false) {
    if (count == 0 || (st_.tensors[t].empty() && !keep)) return;
    if (host_side_ && offloadable(st_.tensors[t])) return;  // in pinned host memory
    const Part part = st_.tensors[t].part;
    const bool step_temp = in_optimizer_ && part == Part::other && t != ddp_buckets_;
    const bool host = part == Part::master_params || part == Part::optimizer_state ||
                      part == Part::master_grads || step_temp;
    if (sh_.offload && host) return;  // held and stepped on the host (ZeRO-Offload)
    const bool shard = st_.tensors[t].scope == Scope::state;
    if (sh_.offload_params && shard && (part == Part::params || part == Part::grads)) return;
    const bool state = st_.tensors[t].scope == Scope::state;  // in-flight tensors are whole
    st_.entries.push_back({t, state ? shard_ranks(part, step_temp) : 1, count});
  }
  // ZeRO (Rajbhandari et al. 2020): a rank keeps 1/ranks of each sharded state.
  std::uint32_t shard_ranks(Part part, bool step_temp) const {
    const bool sharded =
        (sh_.states &&
         (part == Part::master_params || part == Part::optimizer_state || step_temp)) ||
        (sh_.grads &&
         (part == Part::grads || part == Part::master_grads || part == Part::grad_accum)) ||
        (sh_.params && part == Part::params);
    return sharded ? static_cast<std::uint32_t>(sh_.ranks) : 1;
  }
  // What exists when the step starts (§2.2), with or without the states and gradients.
  void baseline(bool with_states, bool with_grads) {
    if (in_.keeps_output && in_.lm_head && (steady_ || !forward_)) add(held_);
    add(params_);
    add(master_);
    if (with_states) add(states_, 1, true);
    add(grad_accum_);
    add(inputs_);
    add(buffers_);
    add(ddp_buckets_);
    if (with_grads) add(grads_);
  }
  // The saved tensors of layers [first, first + count), except those whose slot `freed` says
  // are released; the first layer lacks those kept only for its input's gradient.
  template <typename Freed>
  void layers(u64 first, u64 count, Freed&& freed) {
    for (const std::uint32_t i : layer_ids_) {
      const bool skip = st_.tensors[i].skips_first && first == 0 && count > 0;
      if (!freed(st_.tensors[i].slot)) add(i, count - (skip ? 1 : 0));
    }
  }
  void layers(u64 first, u64 count) {
    layers(first, count, [](Slot) { return false; });
  }
  void scoped(Scope s, u64 count = 1) {
    for (const std::uint32_t i : scope_ids_[static_cast<std::size_t>(s)]) add(i, count);
  }
  // The saved tensors by scope, and those of a walk layer (its scope and its MLP's).
  void index_saved() {
    for (std::uint32_t i = 0; i < st_.tensors.size(); ++i) {
      const Tensor& t = st_.tensors[i];
      if (t.part != Part::activations) continue;
      scope_ids_[static_cast<std::size_t>(t.scope)].push_back(i);
      if (t.scope == Scope::layer || t.scope == st_.walk_mlp) layer_ids_.push_back(i);
    }
  }
  void saved_except_target() {
    host([&] {
      for (const Entry& e : st_.saved) {
        if (st_.tensors[e.tensor].slot != Slot::target) add(e.tensor, e.count);
      }
    });
    stash();
  }
  void layer_casts(u64 count) {
    add(cast_down_, count);
    add(cast_mlp_, count);
    add(cast_o_, count);
    add(cast_rest_, count);
  }
  bool ck() const { return checkpointed(in_.recompute); }
  // The logits: a list of chunks under the chunked losses, N x V in all; LitGPT's training loop
  // keeps them through backward.
  std::uint32_t logits() {
    return temp(
        in_.loss == Loss::chunked_tokens ? "logits (chunks kept by the training loop)" : "logits",
        Part::other, in_.ec, shape({sym::N, D_.V}));
  }
  // V / chunks: one of torchtune's chunks has N/chunks x V elements, written N x ceil(V/chunks)
  // so that it stays a polynomial in b and s (exact when the chunks divide s and V).
  Sym vocab_chunk() const {
    return dim("V/chunks", ceil_div(in_.V, std::max<u64>(1, in_.loss_chunk)));
  }
  bool llama() const { return in_.graph == LayerGraph::llama; }
  // A tied lm_head shares the embedding weight: it has a gradient only when that is trainable.
  bool tied_grad() const { return in_.tied && lp_.embed_trainable > 0; }
  bool grads_live(bool steady) const {
    if (in_bwd_) return false;  // each gradient is freed by its step in backward
    return (steady && !run_.training.grads_set_to_none) || run_.training.grad_accum > 1;
  }

  // The name of an in-layer moment: at the last or the first layer, or at any in the timeline.
  std::string_view layer_moment(std::string_view last, std::string_view first, std::string_view any,
                                u64 j) const {
    if (timeline_) return any;
    return j == in_.L - 1 ? last : first;
  }
  std::int32_t layer_index(u64 j) const { return timeline_ ? static_cast<std::int32_t>(j) : -1; }

  void forward_end(bool steady);
  void forward_attention(bool steady, u64 j);
  bool before_scores(Slot s) const;
  void attention_prelude(bool steady, u64 j);
  void checkpointed_prelude();
  std::vector<ScoreAlternative> llama_scores() const;
  std::vector<ScoreAlternative> gpt2_scores() const;
  void forward_layers_below(bool steady);
  void backward_start(bool steady);
  void backward_end(bool steady);
  void backward_layer(bool steady, u64 j);
  void layer_x0(bool steady, u64 j);
  void backward_mlp(bool steady, u64 j);
  void backward_attention(bool steady, u64 j);
  void attention_backward_base(bool steady, u64 j, Slot also);
  void llama_softmax_backward(bool steady, u64 j);
  void gpt2_softmax_backward(bool steady, u64 j);
  void after_backward(bool steady);
  void in_backward_statics();
  void step_in_backward(std::size_t which);
  void head_step_in_backward(bool steady);
  void fsdp_tensors();
  void fsdp_gathered(std::string_view moment);
  void fsdp_post_backward(bool steady, u64 j);
  // Gradients autograd computes inside a layer's backward: in FSDP's param_dtype.
  u64 flight_grad_width() const { return fsdp_ ? eu_ : width(run_.precision.grad); }
};

// Under FSDP's no_sync() the gradients of a layer are its unit's whole flat gradient (over its
// frozen parameters too with use_orig_params), and the head's the root unit's.
void Walker::unsharded_unit_grads(u64 eg, u64& head, u64& layer) const {
  const u64 all = checked_mul(fs_.grads, sh_.ranks);
  const u64 layers = checked_mul(fs_.layer_trainable, in_.L);
  layer = checked_mul(eg, fs_.layer_trainable);
  head = checked_mul(eg, all - std::min(all, layers));
}

void Walker::statics(const Inventory& inv0) {
  index_saved();
  const auto& p = run_.precision;
  const u64 trainable = lp_.trainable;
  const u64 eg = width(p.grad);
  fsdp_tensors();
  params_ = constant("parameters", Part::params,
                     fsdp_ && sh_.params ? checked_mul(fs_.param_bytes, sh_.ranks)
                                         : parameter_bytes(inv0, p.param));
  master_ = constant("master weights", Part::master_params,
                     p.master ? checked_mul(width(*p.master), trainable) : 0);
  states_ = constant("optimizer states", Part::optimizer_state, 0);
  st_.states_tensor = states_;
  sizes_ = optimizer_sizes(run_, run_.optimizer, lp_, in_.cuda);
  resize_optimizer(st_, sizes_);
  grad_accum_ = constant("grad accumulation buffer", Part::grad_accum,
                         p.grad_accum ? checked_mul(width(*p.grad_accum), trainable) : 0);
  inputs_ = temp("input ids (int64)", Part::inputs, 8, shape({sym::N}));
  buffers_ = temp("rotary inv_freq buffer", Part::buffers, in_.ex,
                  shape({dim("d/2", in_.rotary ? in_.d / 2 : 0)}));
  grads_ =
      constant("gradients", Part::grads,
               checked_mul(eg, fsdp_ && (sh_.grads || no_sync_) ? checked_mul(fs_.grads, sh_.ranks)
                                                                : trainable));
  // Allocated with the DDP reducer and kept for the whole run (torch/csrc/distributed/c10d/
  // reducer.cpp: each bucket's flat `gradients` tensor).
  ddp_buckets_ = constant("DDP all-reduce buckets (a second copy of the gradients)", Part::other,
                          run_.parallel.ddp_buckets() ? checked_mul(eg, trainable) : 0);
  copy_grads_ = p.master && width(p.grad) < width(*p.master);
  opt_grads_ = copy_grads_ ? constant("master gradients", Part::master_grads,
                                      checked_mul(width(*p.master), trainable))
                           : grads_;
  const u64 lm = in_.lm_head ? in_.V * in_.h : 0;
  u64 head_bytes = eg * (lp_.head_trainable + (tied_grad() ? lm : 0));
  u64 layer_bytes = eg * lp_.layer_trainable;
  if (no_sync_) unsharded_unit_grads(eg, head_bytes, layer_bytes);
  head_grads_ = constant("gradients of the head (final norm, lm_head)", Part::grads, head_bytes);
  layer_grads_ = constant("gradients of one layer", Part::grads, layer_bytes);
  // FSDP's sharded gradients are the reduce-scatter's output: FSDP1 allocates it under its
  // post-backward stream (_get_reduce_scatter_tensors), FSDP2 under its reduce-scatter stream
  // (foreach_reduce: reduce_output, whose views become the gradients).
  for (const std::uint32_t t : {grads_, head_grads_, layer_grads_}) {
    if (fsdp_ && sh_.grads) st_.tensors[t].stream = Stream::fsdp_reduce;
  }
  const u64 ew = in_.amp ? in_.ew : 0;
  const u64 I = in_.moe_layers == in_.L && in_.moe_layers ? in_.I_moe : in_.I;
  const u64 down = std::min(ew * I * in_.h, ew * lp_.layer_mlp_matmul);
  cast_down_ = constant("autocast copy of the MLP down projection", Part::param_casts, down);
  cast_mlp_ = constant("autocast copies of the other MLP weights", Part::param_casts,
                       ew * lp_.layer_mlp_matmul - down);
  cast_o_ = constant("autocast copy of o_proj", Part::param_casts, ew * lp_.layer_o_matmul);
  cast_rest_ = constant("autocast copies of the attention input projections", Part::param_casts,
                        ew * (lp_.layer_matmul - lp_.layer_mlp_matmul - lp_.layer_o_matmul));
  loss_ = constant("loss (0-d fp32)", Part::other, 4);
  held_ = add_tensor(st_, "logits of the model's output, held by the training loop", Part::other,
                     Scope::state, Slot::none, in_.loss == Loss::hf_upcast ? 4 : in_.ec,
                     shape({sym::N, D_.V}));
  seed_ = constant("backward seed (ones_like of the loss)", Part::other, 4);
  // torch.utils.checkpoint keeps the CPU RNG state per layer; on CUDA it lives on the host.
  rng_ = temp("checkpoint CPU RNG states", Part::other, kRngStateBytes,
              shape({dim("L", ck() && !in_.cuda ? in_.L : 0)}));
  grad_out_ = temp("gradient of the layer output", Part::other, in_.ex, shape({T_, D_.h}));
  attention_tensors();
  if (offload_) stash_ = offload_stash(st_, in_);
  if (in_bwd_) in_backward_statics();
  // ZeRO-3 gathers the layer being computed and prefetches the next.
  gathered_ = constant("gathered parameters (this layer and the prefetched next)", Part::other,
                       2 * (parameter_bytes(inv0, p.param) / std::max<u64>(1, in_.L)));
}

// FSDP's all-gathered units and reduce-scatter buffers (docs/parallelism.md, "FSDP"). The
// rows' shards, with their padding, come from the same FsdpShards.
void Walker::fsdp_tensors() {
  if (!fsdp_) return;
  const auto& par = run_.parallel;
  const Dtype gd = par.fsdp_param_dtype.value_or(run_.precision.param);
  fs_ = fsdp_shards_of(run_);
  eu_ = width(gd);
  er_ = width(par.fsdp_reduce_dtype.value_or(gd));
  const bool v2 = par.fsdp_version == 2;
  fsdp_root_ = in_flight(
      "FSDP root unit all-gathered (embeddings, final norm, head; not resharded after forward)",
      Part::other, sh_.params ? fs_.root_bytes : 0);
  fsdp_unit_ = in_flight("FSDP layer unit all-gathered (unsharded parameters, param_dtype)",
                         Part::other, sh_.params ? fs_.layer_bytes : 0);
  fsdp_ag_ = in_flight("FSDP2 all-gather output of a layer unit (flat, before or after copy-out)",
                       Part::other, v2 && sh_.params ? fs_.layer_bytes : 0);
  fsdp_rs_held_ = in_flight(
      "FSDP2 reduce-scatter input of the unit after (reduce_dtype, held until the next one)",
      Part::other, v2 ? checked_mul(er_, fs_.layer_trainable) : 0);
  // FSDP1 all-gathers into the unsharded flat parameters under its unshard stream
  // (_runtime_utils._unshard); FSDP2 allocates the flat all-gather output under its copy-in
  // stream (foreach_all_gather) and copies it out on the default stream.
  for (const std::uint32_t t : v2 ? std::vector{fsdp_ag_} : std::vector{fsdp_root_, fsdp_unit_})
    st_.tensors[t].stream = Stream::fsdp_all_gather;
}

// The FSDP units all-gathered at a moment. The root is gathered first and kept to the end of
// backward (FSDP1 _post_forward_reshard skips the root; FSDP2's _lazy_init clears its
// post-forward mesh). A layer unit is freed after its forward unless SHARD_GRAD_OP, and after its
// backward; backward prefetches the unit before it: FSDP1's BACKWARD_PRE (the default) issues it
// in the pre-backward hook, FSDP2's pre_backward calls _prefetch_unshard, whose flat all-gather
// output is copied out only when that unit starts. FSDP2 keeps a unit's flat all-gather output in
// forward until the next all-gather (all_gather_state) and the last reduce-scatter input in
// backward until the next (reduce_scatter_state).
void Walker::fsdp_gathered(std::string_view moment) {
  const u64 L = in_.L;
  const bool v2 = run_.parallel.fsdp_version == 2;
  const bool raf = run_.parallel.reshard_after_forward();
  add(fsdp_root_);
  u64 units = 0, flat = 0;
  if (moment == "forward_attention") {
    units = raf ? 1 : L;
    flat = v2 ? 1 : 0;
  } else if (moment == "forward_end") {
    units = raf ? 0 : L;
  } else if (moment == "backward_start") {  // FSDP2's root prefetches the last layer
    units = raf ? 0 : L;
    flat = v2 && raf ? 1 : 0;
  } else if (moment == "backward_end") {  // the first layer's reduce-scatter input
    add(fsdp_rs_held_);
  } else if (moment.ends_with("_layer")) {
    const u64 j = moment.ends_with("first_layer") ? 0 : L - 1;
    units = raf ? 1 : j + 1;
    if (raf && j > 0) ++(v2 ? flat : units);
    if (j + 1 < L && !moment.starts_with("post_backward")) add(fsdp_rs_held_);
  }
  add(fsdp_unit_, units);
  add(fsdp_ag_, flat);
}

// FSDP's post-backward of layer unit j: its saved tensors are released and its unsharded
// gradient is reduced. FSDP1 (_post_backward_hook): autograd has copied the views' gradients into
// the flat gradient, which is cast to reduce_dtype when that differs; FSDP2 (foreach_reduce):
// the gradients are copied into one reduce-scatter input in reduce_dtype.
void Walker::fsdp_post_backward(bool steady, u64 j) {
  const std::string_view name =
      j == in_.L - 1 ? "post_backward_last_layer" : "post_backward_first_layer";
  const u64 n = fs_.layer_trainable;
  const std::uint32_t grads =
      in_flight("unsharded gradient of the layer unit (param_dtype)", Part::grads, eu_ * n);
  const auto start = [&] {
    begin(name, "backward");
    layer_x0(steady, j);
    add(grads);
  };
  if (run_.parallel.fsdp_version == 2) {
    start();
    add(in_flight("FSDP2 reduce-scatter input (reduce_dtype)", Part::other, er_ * n));
    end();
    return;
  }
  start();
  add(in_flight("gradients of the unit's parameter views (before the flat copy)", Part::grads,
                eu_ * n));
  end();
  if (er_ != eu_) {
    start();
    // Cast under the post-backward stream (_post_backward_hook).
    const std::uint32_t cast =
        in_flight("flat gradient cast to reduce_dtype", Part::other, er_ * n);
    st_.tensors[cast].stream = Stream::fsdp_reduce;
    add(cast);
    end();
  }
}

void Walker::attention_tensors() {
  const Sym h = D_.h, a = D_.a, d = D_.d;
  const bool amp = in_.amp;
  bias_cache_ =
      constant("autocast bias cache", Part::param_casts, amp ? in_.ew * lp_.matmul_biases : 0);
  qkv_casts_ = constant("autocast copies of this layer's q/k/v weights", Part::param_casts,
                        amp ? in_.ew * lp_.layer_qkv_matmul : 0);
  norm32_ = temp("norm output in fp32 (autocast input)", Part::other, 4, shape({sym::N, h}));
  qkv32_ = temp("q, k, v in fp32 (rotary under autocast)", Part::other, 4,
                shape({dim("3", 3), sym::N, a, d}));
  qrot_ = temp("rotated q (not saved)", Part::other, in_.ex, shape({sym::N, a, d}));
  fused_qkv_ = temp("fused qkv output (held by the q/k/v views)", Part::other, in_.ec,
                    shape({dim("3", 3), sym::N, h}));
}

void Walker::walk(bool steady) {
  out_ = steady ? &st_.steady : &st_.first;
  steady_ = steady;
  forward_end(steady);
  forward_attention(steady, in_.L - 1);
  backward_start(steady);
  backward_end(steady);
  backward_layer(steady, in_.L - 1);
  if (in_.L > 1) backward_layer(steady, 0);
  after_backward(steady);
}

// The steady walk in the order the step runs, at every layer (docs/design.md, "The timeline").
void Walker::timeline() {
  out_ = &st_.timeline;
  timeline_ = true;
  steady_ = true;
  for (u64 j = 0; j < in_.L; ++j) forward_attention(true, j);
  forward_end(true);
  backward_start(true);
  for (u64 j = in_.L; j-- > 0;) backward_layer(true, j);
  backward_end(true);
  after_backward(true);
  timeline_ = false;
}

// At nll_loss: everything saved, the logits, the padded labels, the loss (§4.1).
void Walker::forward_end(bool steady) {
  const Sym h = D_.h, V = D_.V;
  begin("forward_end", "forward");
  baseline(steady, grads_live(steady));
  host([&] {
    for (const Entry& e : st_.saved) add(e.tensor, e.count);
  });
  stash();
  if (in_.amp) {
    add(constant("autocast weight cache (every matmul weight and bias)", Part::param_casts,
                 in_.ew * (lp_.autocast_weights + lp_.matmul_biases) +
                     (in_.tied && in_.lm_head ? in_.ew * in_.V * in_.h : 0)));
    add(temp("final norm output (fp32, referenced by forward)", Part::other, 4,
             shape({sym::N, h})));
  }
  if (in_.lm_head) {
    // A compiled chunked loss keeps the chunks themselves: they are among the saved tensors.
    const bool compiled_loss = in_.compile && in_.loss == Loss::chunked;
    const bool upcast = in_.loss == Loss::hf_upcast;
    if ((in_.ec != 4 || in_.loss == Loss::chunked_tokens) && !compiled_loss && !upcast)
      add(logits());
    // Megatron's loss turns its fp32 copy into the saved softmax in place; torchtune's upcasts
    // one chunk at a time; transformers before 4.45 returns the fp32 logits and shifts a copy.
    if (in_.loss == Loss::hf) add(temp("logits.float()", Part::other, 4, shape({sym::N, V})));
    if (upcast) {
      add(temp("logits (fp32: logits.float() in forward, the model's output)", Part::other, 4,
               shape({sym::N, V})));
      add(temp("shifted logits (fp32, .contiguous() copy)", Part::other, 4, shape({sym::N, V})));
    }
    if (in_.loss == Loss::chunked && in_.ec != 4 && !compiled_loss) {  // fused when compiled
      add(temp("the last chunk's fp32 upcast (logits.float())", Part::other, 4,
               shape({sym::N, vocab_chunk()})));
    }
    add(temp("padded labels (int64)", Part::other, 8, shape({sym::b, sym::s1}), Batch::many));
    add(loss_);
  }
  add(rng_);
  end();
}

// The layers below the current one, and what the forward keeps outside the saved tensors.
void Walker::forward_layers_below(bool steady) {
  baseline(steady, grads_live(steady));
  host([&] {
    scoped(Scope::embed);
    scoped(Scope::shared);
  });
  if (llama()) {
    if (!ck() && in_.causal)
      add(temp("additive causal mask (not saved)", Part::other, in_.ex, shape({sym::s2})));
    add(temp("position ids (int64)", Part::other, 8, shape({sym::s})));
  }
}

// The first norm of the current layer (the only one in a parallel block).
bool first_norm(Slot s, bool has_norm1) { return s == (has_norm1 ? Slot::norm1 : Slot::norm2); }

// One alternative of the score moment (§4.1 S2_live): temporaries of b*a*s^2 elements (name,
// bytes per element), scalars, and whether the layer's softmax output is live too.
struct ScoreAlternative {
  std::array<std::pair<std::string_view, std::uint64_t>, 4> temps{};
  std::uint64_t scalars = 0;
  bool softmax = false;
};

// The tensors of the current layer saved before its attention scores exist.
bool Walker::before_scores(Slot s) const {
  const bool has_norm1 = std::any_of(layer_ids_.begin(), layer_ids_.end(), [&](std::uint32_t i) {
    return st_.tensors[i].slot == Slot::norm1;
  });
  if (first_norm(s, has_norm1) || s == Slot::q_in || s == Slot::q || s == Slot::k) return true;
  if (in_.attention != Attention::eager) return s == Slot::v || s == Slot::o_in || s == Slot::lse;
  return llama() && (s == Slot::v || s == Slot::scale);
}

// Layer j's attention in the forward pass up to its scores (the walk's is the last layer's): the
// layers below, what the current one has saved or holds (§4.1 forward_attn, rows 1-7 and the
// autocast copies).
void Walker::attention_prelude(bool steady, u64 j) {
  begin("forward_attention", "forward", layer_index(j));
  forward_layers_below(steady);
  if (ck()) {
    host([&] { scoped(Scope::checkpoint, j + 1); });
    stash();
    add(rng_);
    layer_casts(j);
    checkpointed_prelude();
    return;
  }
  host([&] { layers(0, j); });
  stash();
  layer_casts(j);
  layers(j, 1, [&](Slot s) { return !before_scores(s); });
  if (in_.sp) {
    add(temp("all-gathered attention input (sequence parallel)", Part::other, in_.ec,
             shape({sym::N, D_.h})));
  }
  if (in_.cp > 1) {
    add(temp("context-parallel ring: the next K/V block", Part::other, in_.ec,
             shape({dim("2", 2), sym::N, D_.k, D_.d})));
  }
  if (in_.amp) {
    add(bias_cache_);
    add(qkv_casts_);
    add(norm32_);
    if (llama()) add(qkv32_);
  } else if (llama()) {
    add(qrot_);
  }
  if (!llama() && in_.attention == Attention::eager) {
    add(fused_qkv_);
    add(constant("divisor sqrt(d)", Part::other, in_.ec));
    add(constant("mask_value (0-d fp32)", Part::other, 4));
  }
}

// Under full recompute the layer runs without grad: nothing of it is saved (§4.1, Xck).
void Walker::checkpointed_prelude() {
  const Sym h = dim("h", in_.h);
  const bool kernel = in_.attention != Attention::eager;
  if (!llama() && !kernel) {
    add(bias_cache_);
    add(temp("ln_1 output (no grad)", Part::other, in_.amp ? 4 : in_.ex, shape({sym::N, h})));
    add(fused_qkv_);
    return;
  }
  if (in_.amp) {
    add(bias_cache_);
    if (kernel) add(qkv_casts_);
    add(norm32_);
    if (llama()) add(qkv32_);
  } else if (!kernel) {
    add(qrot_);
  }
  if (kernel || !in_.amp)
    add(temp("norm output (no grad)", Part::other, in_.ex, shape({sym::N, h})));
  if (kernel) {
    layers(in_.L - 1, 1, [](Slot s) {
      return !(s == Slot::q || s == Slot::k || s == Slot::v || s == Slot::o_in || s == Slot::lse);
    });
  } else if (!in_.amp) {
    layers(in_.L - 1, 1, [](Slot s) { return !(s == Slot::k || s == Slot::v); });
  }
}

// §4.1 S2_live for Llama's eager attention, without and with full recompute.
std::vector<ScoreAlternative> Walker::llama_scores() const {
  const u64 ec = in_.ec;
  const bool amp = in_.amp, cuda = in_.cuda;
  std::vector<ScoreAlternative> out;
  const auto one = [&](std::string_view name, u64 width, u64 scalars) {
    ScoreAlternative alt;
    alt.temps[0] = {name, width};
    alt.scalars = scalars;
    out.push_back(alt);
  };
  if (ec == 4) {
    one("scores q@k^T and scores x scale (fp32)", 8, ck() ? 12 : 4);
  } else if (ck()) {  // in no-grad the fp32 softmax output dies once it is cast
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
    const u64 w = ck() ? (ec == 2 && !amp ? (cuda ? 5 : 7) : (cuda ? 9 : 13))
                       : (half ? (cuda ? 9 : 11) : (cuda ? 9 : 13));
    one(cuda ? "softmax output, dropout mask and output (fused dropout)"
             : "softmax output, dropout mask, its fp32 cast, dropout output",
        w, 0);
  }
  return out;
}

// §4.1 S2_live for GPT-2's eager attention: the scores and their masked copy, or the softmax
// output with the dropout's mask, its CPU cast and its output.
std::vector<ScoreAlternative> Walker::gpt2_scores() const {
  const u64 e = in_.ec == 4 ? 4 : 2;
  std::vector<ScoreAlternative> out(1);
  out[0].temps[0] = {"scores and masked scores", 2 * e};
  if (in_.p_attn > 0) {
    ScoreAlternative alt;
    std::size_t n = 0;
    alt.softmax = !ck();
    if (ck()) alt.temps[n++] = {"softmax output", e};
    alt.temps[n++] = {"attention dropout mask (bool)", 1};
    if (!in_.cuda) alt.temps[n++] = {"dropout mask cast", e};
    alt.temps[n] = {"attention dropout output", e};
    out.push_back(alt);
  }
  return out;
}

void Walker::forward_attention(bool steady, u64 j) {
  if (in_.attention != Attention::eager) {
    attention_prelude(steady, j);
    end();
    return;
  }
  const Shape S2 = shape({sym::b, D_.a, sym::s2});
  for (const ScoreAlternative& alt : llama() ? llama_scores() : gpt2_scores()) {
    attention_prelude(steady, j);
    if (alt.softmax) {  // saved, or under selective recompute a transient all the same
      for (const std::uint32_t i : scope_ids_[static_cast<std::size_t>(Scope::core)]) {
        if (st_.tensors[i].slot == Slot::sm) add(i);
      }
      layers(in_.L - 1, 1, [](Slot s) { return s != Slot::sm; });
    }
    for (const auto& [name, width] : alt.temps) {
      if (width) add(temp(name, Part::other, width, S2));
    }
    add(constant("score scalars", Part::other, alt.scalars));
    end();
  }
}

// After NllLossBackward0, while LogSoftmaxBackward0 allocates grad_logits (§4.2).
void Walker::backward_start(bool steady) {
  const Sym V = D_.V;
  begin("backward_start", "backward");
  baseline(steady, grads_live(steady));
  saved_except_target();
  u64 casts = 0;
  if (in_.amp) {
    const u64 tied_copy = in_.tied && in_.lm_head ? in_.ew * in_.V * in_.h : 0;
    casts = ck() ? (in_.lm_head ? in_.ew * in_.V * in_.h : 0)
                 : in_.ew * lp_.autocast_weights + tied_copy;
  }
  add(constant("autocast weight copies saved for backward", Part::param_casts, casts));
  if (in_.lm_head && (in_.loss == Loss::hf || in_.loss == Loss::hf_upcast)) {
    add(temp("gradient of the log-probs (fp32)", Part::other, 4, shape({sym::N, V})));
    add(temp("gradient of the logits (fp32)", Part::other, 4, shape({sym::N, V})));
  } else if (in_.lm_head && in_.loss == Loss::chunked && in_.compile) {
    // The compiled backward writes one chunk's gradient in the logits' dtype, fused.
    add(temp("gradient of one chunk's logits (compiled loss)", Part::other, in_.ec,
             shape({sym::N, vocab_chunk()})));
  } else if (in_.lm_head && in_.loss == Loss::chunked) {
    // One chunk's backward at a time; the chunks' bf16 logits were deleted after the loss.
    add(temp("gradients of one chunk's log-probs and logits (fp32)", Part::other, 4,
             shape({dim("2", 2), sym::N, vocab_chunk()})));
  } else if (in_.lm_head && in_.loss == Loss::chunked_tokens) {
    const u64 w = in_.amp ? 4 : in_.ec;
    add(temp("gradients of one chunk's log-probs and logits", Part::other, w,
             shape({dim("2", 2), sym::b, dim("c", in_.loss_chunk), V})));
    add(logits());
  } else if (in_.lm_head) {  // written over the saved softmax, then cast
    add(temp("gradient of the logits (cast from the fp32 softmax)", Part::other, in_.ec,
             shape({sym::N, V})));
  }
  add(loss_);
  add(seed_);
  add(rng_);
  end();
  if (in_bwd_) head_step_in_backward(steady);
}

// The embedding's backward, when every gradient exists.
void Walker::backward_end(bool steady) {
  begin("backward_end", "backward");
  baseline(steady, !in_bwd_);
  if (tied_grad() && in_.lm_head) {
    // The tied weight's gradient arrives twice (AccumulateGrad's buffer, then the embedding's
    // zeros-initialised grad) and is summed out of place.
    add(temp("tied embedding gradient: lm_head's and the embedding's", Part::other,
             width(run_.precision.grad), shape({dim("2", 2), dim("V", in_.V), dim("h", in_.h)})));
  } else {
    add(temp("gradient of the embedding output", Part::other, in_.ex, shape({T_, D_.h})));
  }
  add(loss_);
  add(seed_);
  add(rng_);
  end();
  if (in_bwd_ && lp_.embed_trainable > 0) {  // the embedding's step, the last of the backward
    begin("optimizer_step_in_backward_embedding", "backward");
    baseline(steady, false);
    step_in_backward(2);
    add(loss_);
    add(seed_);
    end();
  }
}

// What layer j's backward starts with, without the current layer's own tensors and copies.
void Walker::layer_x0(bool steady, u64 j) {
  baseline(steady, grads_live(steady));
  add(loss_);
  add(seed_);
  host([&] {
    scoped(Scope::embed);
    scoped(Scope::shared);
  });
  if (ck()) {
    add(rng_);
    // The inputs of layers 0..j (layer j's brought back); under per-op checkpointing the
    // outputs layers below j cached (layer j's are its recomputation's saved tensors).
    for (const std::uint32_t i : scope_ids_[static_cast<std::size_t>(Scope::checkpoint)]) {
      host([&] { add(i, j); });
      if (st_.tensors[i].slot == Slot::none) add(i);
    }
    if (llama() && in_.ex == 2) {  // the recompute saves a new copy of the layer input
      add(temp("layer input re-saved by the recompute", Part::activations, in_.ex,
               shape({sym::N, dim("h", in_.h)})));
    }
  } else {
    host([&] { layers(0, j); });
    layer_casts(j);
  }
  if (in_bwd_) {
    add(tied_buffer_);
  } else if (!grads_live(steady)) {
    add(head_grads_);
    add(layer_grads_, in_.L - 1 - j);
  }
  if (in_.lm_head && in_.loss == Loss::chunked_tokens) add(logits());
  add(grad_out_);
}

void Walker::backward_layer(bool steady, u64 j) {
  backward_mlp(steady, j);
  if (in_bwd_) {  // the down projection's step, as its gradient is accumulated
    begin(j == in_.L - 1 ? "optimizer_step_in_backward_last_layer"
                         : "optimizer_step_in_backward_first_layer",
          "backward");
    layer_x0(steady, j);
    layers(j, 1);
    layer_casts(1);
    step_in_backward(0);
    end();
  }
  backward_attention(steady, j);
  if (fsdp_ && sh_.grads) fsdp_post_backward(steady, j);
}

// MulBackward0 of act(gate) x up (Llama), or c_proj's AddmmBackward and the first
// activation-backward op (GPT-2); down_proj's autocast copy is released first.
void Walker::backward_mlp(bool steady, u64 j) {
  const std::string_view name =
      layer_moment("backward_mlp_last_layer", "backward_mlp_first_layer", "backward_mlp", j);
  const Sym h = dim("h", in_.h);
  const bool all_moe = in_.moe_layers == in_.L && in_.moe_layers;
  const Sym I = all_moe ? D_.Imoe : D_.I;
  const Shape NI = all_moe ? shape({sym::N, dim("top_k", in_.topk), I}) : shape({sym::N, I});
  const u64 ec = in_.ec, eg = flight_grad_width();
  const std::uint32_t down_grad = in_flight("gradient of the down projection weight", Part::grads,
                                            in_bwd_ ? 0 : eg * lp_.down_trainable);
  const auto current = [&](bool keep_down_copy, bool keep_mmask) {
    layer_x0(steady, j);
    layers(j, 1, [&](Slot s) { return !keep_mmask && s == Slot::mmask; });
    if (keep_down_copy) add(cast_down_);
    add(cast_mlp_);
    add(cast_o_);
    add(cast_rest_);
  };
  if (llama()) {
    begin(name, "backward", layer_index(j));
    current(false, true);
    add(down_grad);
    Shape two = NI;
    std::copy_backward(two.factors.begin(), two.factors.begin() + two.rank,
                       two.factors.begin() + two.rank + 1);
    two.factors[0] = dim("2", 2);
    ++two.rank;
    add(temp("gradients of act(gate) and of up (MulBackward0)", Part::other, ec, two));
    end();
    if (in_.grads.nf4 && !all_moe) {
      // QLoRA: the 4-bit down_proj dequantises its weight again for the input gradient
      // (bitsandbytes MatMul4Bit.backward, torchao's linear_nf4): it lives beside that gradient.
      begin(name, "backward");
      current(false, true);
      add(temp("dequantized down_proj weight (for the input gradient)", Part::other, ec,
               shape({h, I})));
      add(temp("gradient of the down_proj input", Part::other, ec, NI));
      end();
    }
    return;
  }
  begin(name, "backward", layer_index(j));
  current(true, false);
  add(temp("gradient of the MLP output", Part::other, ec, shape({sym::N, h})));
  add(temp("gradient of the c_proj input", Part::other, ec, NI));
  if (in_.amp) {
    add(in_flight("c_proj weight copy for the input gradient", Part::param_casts,
                  in_.ew * in_.I * in_.h));
  } else {
    add(down_grad);
  }
  end();
  begin(name, "backward", layer_index(j));
  current(false, false);
  const u64 two = in_.act == ActFn::gelu_new || in_.act == ActFn::relu ? 2 : 1;
  add(temp("activation backward temporaries", Part::other, two * ec, NI));
  add(down_grad);
  end();
}

// What the attention core's backward starts from: layer j's backward after the MLP, the second
// norm and o_proj have released their saved tensors and weight copies (§4.2 M_attn), less
// the saved tensor `also` that this op releases.
void Walker::attention_backward_base(bool steady, u64 j, Slot also) {
  begin(layer_moment("backward_attention_last_layer", "backward_attention_first_layer",
                     "backward_attention", j),
        "backward", layer_index(j));
  layer_x0(steady, j);
  layers(j, 1, [&](Slot s) {
    const bool mlp_side =
        s == Slot::mlp || s == Slot::norm2 || s == Slot::mlp_in || s == Slot::o_in;
    const bool gpt2_side = !llama() && (s == Slot::mmask || s == Slot::rmask);
    return mlp_side || gpt2_side || (also != Slot::none && s == also);
  });
  add(cast_rest_);
  add(in_flight("gradients of the MLP, post-attention norm and o_proj weights", Part::grads,
                in_bwd_ ? 0
                        : flight_grad_width() * (lp_.layer_mlp_trainable + lp_.norm_trainable +
                                                 lp_.layer_o_trainable)));
  if (in_.attention == Attention::eager && in_.recompute == Recompute::selective) {
    for (const std::uint32_t i : scope_ids_[static_cast<std::size_t>(Scope::core)]) {
      if (st_.tensors[i].slot != also) add(i);  // the recomputed core is live again
    }
  }
  if (ck()) {
    add(temp("gradient of the layer output kept by checkpoint", Part::other, in_.ex,
             shape({sym::N, dim("h", in_.h)})));
  }
}

// SoftmaxBackward0, or the SDPA/flash kernel's backward (§4.2, §5.2).
void Walker::backward_attention(bool steady, u64 j) {
  const Sym a = D_.a, d = D_.d;
  if (in_.attention != Attention::eager) {
    attention_backward_base(steady, j, Slot::none);
    add(temp("gradients of q, k and v", Part::other, in_.ec, shape({dim("3", 3), sym::N, a, d})));
    if (in_.cp > 1) {
      add(temp("context-parallel ring: K/V and their gradients in flight", Part::other, in_.ec,
               shape({dim("4", 4), sym::N, D_.k, d})));
    }
    add(temp("softmax delta (fp32, one per row)", Part::other, 4, shape({sym::b, a, sym::s})));
    if (in_.attention == Attention::flash)
      add(temp("dq accumulator (fp32)", Part::other, 4, shape({sym::N, a, d})));
    end();
  } else if (llama()) {
    llama_softmax_backward(steady, j);
  } else {
    gpt2_softmax_backward(steady, j);
  }
}

// Llama: the fp32 grads of the probabilities and the scores (releasing the compute-dtype
// probabilities), or with attention dropout its backward (releasing the dropout output).
void Walker::llama_softmax_backward(bool steady, u64 j) {
  const Sym a = D_.a;
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
    add(v_grad);
    add(v_grad_one);
    end();
  };
  if (in_.p_attn > 0) {
    const u64 e_do = in_.ex == 2 && !in_.amp ? 2 : 4;  // the dropout's dtype
    attention_backward_base(steady, j, Slot::dropped);
    add(temp(cuda ? "dropout backward (fused): mask cast and product"
                  : "dropout backward: mask cast and two products",
             Part::other, (cuda ? 2 : 3) * e_do, S2));
    add(constant("dropout backward scalars", Part::other, cuda ? 0 : 8 + e_do));
    finish();
    attention_backward_base(steady, j, Slot::dropped);
    add(temp("softmax backward: grads of the probabilities and the scores", Part::other, 7, S2));
    finish();
    return;
  }
  attention_backward_base(steady, j, Slot::pc);
  add(temp("softmax backward: grads of the probabilities and the scores (fp32)", Part::other, 4,
           shape({dim("2", 2), sym::b, a, sym::s2})));
  finish();
}

// GPT-2: softmax backward in the softmax's dtype, or the dropout's backward; at batch 1 the
// v copy stays (q, k and v share one storage).
void Walker::gpt2_softmax_backward(bool steady, u64 j) {
  const Sym a = D_.a;
  const Shape S2 = shape({sym::b, a, sym::s2});
  const u64 ec = in_.ec;
  const bool cuda = in_.cuda;
  const u64 e_sm = ec == 4 || (in_.amp && cuda) ? 4 : ec;
  attention_backward_base(steady, j, Slot::none);
  if (in_.p_attn > 0) {
    add(temp(cuda ? "dropout backward (fused)" : "dropout backward: mask cast and product",
             Part::other, (cuda ? 1 : 2) * e_sm, S2));
    add(constant("dropout backward scalars", Part::other, cuda ? 0 : 8 + e_sm));
  } else {
    add(temp("softmax backward: grads of the probabilities and the scores", Part::other, e_sm,
             shape({dim("2", 2), sym::b, a, sym::s2})));
  }
  add(temp("v copy kept (q/k/v share one storage at batch 1)", Part::other, ec,
           shape({sym::N, dim("h", in_.h)}), Batch::one));
  end();
}

// grad_copy (master weights with lower-precision grads), the optimizer step, master_copy and
// zero_grad (§4.3-4.5). The optimizer creates its states lazily on the first step, before its
// update loop.
void Walker::after_backward(bool steady) {
  if (in_bwd_) return;  // every parameter was stepped in backward; no gradient is left
  const auto& p = run_.precision;
  const u64 eg = width(p.grad);
  if (copy_grads_) {
    const u64 em = width(*p.master);
    u64 best = 0, best_pre = 0, best_n = 0;
    walk_order(lp_, [&](u64, u64 n, u64 prefix) {
      if (prefix == 0) return;
      const u64 v = (em - eg) * prefix + eg * n;
      if (v > best) {
        best = v;
        best_pre = prefix;
        best_n = n;
      }
    });
    begin("grad_copy", "grad_copy");
    baseline(steady, false);
    add(constant("master gradients copied so far (m.grad = p.grad.float())", Part::master_grads,
                 em * best_pre));
    add(constant("gradients not yet released", Part::grads,
                 eg * (lp_.trainable - best_pre + best_n)));
    end();
  }
  const u64 rec = in_.cuda ? 0 : kRecordFunctionBytes;
  const std::uint32_t handle = constant("record_function handle", Part::other, rec);
  begin("optimizer", "optimizer");
  baseline(true, false);
  add(opt_grads_);
  const std::uint32_t temps_id = constant(sizes_.temporaries_name, Part::other, sizes_.temporaries);
  st_.step_temporaries.push_back(temps_id);
  add(temps_id, 1, true);
  end();
  begin("optimizer", "optimizer");
  baseline(true, false);
  add(opt_grads_);
  add(handle);
  end();
  if (p.master) {
    begin("master_copy", "master_copy");
    baseline(true, false);
    add(opt_grads_);
    end();
  }
  begin("zero_grad", "zero_grad");
  baseline(true, false);
  add(opt_grads_);
  add(handle);
  end();
}

// The optimizer in backward (torchtune optimizer_in_bwd): each parameter has an optimizer of
// its own, stepped by a post-accumulate-grad hook; its gradient is then set to None.
void Walker::in_backward_statics() {
  const u64 eg = width(run_.precision.grad);
  const LargestTensors big = largest_tensors(lp_);
  const std::array<u64, 3> n = {big.layer, big.head, big.embed};
  static constexpr std::array<std::string_view, 3> kGrad = {
      "gradient being applied (the layer's largest tensor)",
      "gradient being applied (the head's largest tensor)", "gradient being applied (embedding)"};
  for (std::size_t i = 0; i < 3; ++i) {
    step_grad_[i] = in_flight(kGrad[i], Part::grads, checked_mul(eg, n[i]));
    step_temps_[i] = constant(sizes_.temporaries_name, Part::other,
                              one_tensor_temporaries(run_, run_.optimizer, n[i], in_.cuda));
  }
  tied_buffer_ = constant("lm_head's gradient of the tied embedding (held until the embedding's)",
                          Part::grads, tied_grad() && in_.lm_head ? eg * in_.V * in_.h : 0);
}

void Walker::step_in_backward(std::size_t which) {
  add(step_grad_[which]);
  add(step_temps_[which]);
}

// After the head's backward: its weight's step (an untied lm_head), the log-probs freed.
void Walker::head_step_in_backward(bool steady) {
  if (tied_grad() || lp_.head_trainable == 0) return;
  begin("optimizer_step_in_backward_head", "backward");
  baseline(steady, false);
  host([&] {
    for (const Entry& e : st_.saved) {
      if (st_.tensors[e.tensor].scope != Scope::head) add(e.tensor, e.count);
    }
  });
  stash();
  add(temp("gradient of the lm_head input", Part::other, in_.ex, shape({T_, D_.h})));
  step_in_backward(1);
  add(loss_);
  add(seed_);
  add(rng_);
  end();
}

}  // namespace

Step build_step(const RunSpec& run, const ActivationInputs& in, bool first_step, bool timeline) {
  Step step;
  step.tensors.reserve(96);
  step.entries.reserve(first_step ? 768 : 384);
  add_saved_tensors(step, in);
  ParameterSums lay = parameter_sums(run, in);
  // FSDP's gradients and optimizer states are shards of padded flat (or dim-0) parameters.
  const Sharding sh = sharding_of(run.parallel);
  if (run.parallel.fsdp_version > 0 && sh.grads)
    lay.trainable = checked_mul(fsdp_shards_of(run).trainable, sh.ranks);
  Walker w(step, run, in, lay);
  w.statics(run.model.inventory);
  w.walk(true);
  // The first step is the steady one without the optimizer states before the optimizer phase,
  // unless gradients kept between steps make the walks differ further.
  const bool grads_kept = !run.training.grads_set_to_none && run.training.grad_accum == 1;
  if (first_step && grads_kept) w.walk(false);
  if (timeline) w.timeline();
  return step;
}

}  // namespace memest::detail
