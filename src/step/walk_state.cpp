// The tensors every walk of a step shares, created once: the model state (parameters, master
// weights, optimizer states, gradients), autocast's weight copies of a layer, the step's
// scalars, a layer's attention temporaries and the rules' tensors that live as one. They are
// created in the order the allocator's replay allocates the tensors that appear at one instant.
#include "step/walk.hpp"

#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {

void Walker::create_tensors(const Inventory& inventory) {
  index_saved();
  lived_tensors(lists_.lived, in_);
  lists_.lived_ids.assign(lists_.lived.size(), 0);
  for (const Lived& l : lists_.lived)  // a steady step holds a tensor wherever the first does
    lived_kinds_[static_cast<std::size_t>(l.anchor)] |= l.life.moments(StepOf::steady);
  fsdp_.create_tensors(step_, sharding_of(run_.parallel));
  model_state(inventory);
  gradients();
  weight_copies();
  scalars();
  attention_temporaries();
  stashed_entries(lists_.stash, step_, in_);
  in_backward_.create_tensors(step_, run_, in_, sums_, optimizer_, tied_grad());
  // ZeRO-3 gathers the layer being computed and prefetches the next (Walker::begin enters them
  // where the parameters are sharded and FSDP is off; elsewhere they are the empty tensor).
  const bool gathers = residency_.sharding().params && !fsdp_.on();
  state_.gathered_layers =
      constant("gathered parameters (this layer and the prefetched next)", Part::other,
               gathers ? 2 * (param_bytes_ / std::max<u64>(1, in_.L)) : 0);
}

// The saved tensors by scope (counted, then placed), and those of a walk layer (its scope and
// its MLP's) after them, in one list.
void Walker::index_saved() {
  const auto saved = [&](const Tensor& t) { return t.part == Part::activations; };
  const auto in_layer = [&](const Tensor& t) {
    return t.scope == Scope::layer || t.scope == step_.walk_mlp;
  };
  std::array<std::uint32_t, kScopeCount> count{};
  std::uint32_t layer = 0;
  for (const Tensor& t : step_.tensors) {
    if (!saved(t)) continue;
    ++count[static_cast<std::size_t>(t.scope)];
    if (in_layer(t)) ++layer;
  }
  for (std::size_t s = 0; s < kScopeCount; ++s) scope_start_[s + 1] = scope_start_[s] + count[s];
  lists_.by_scope.resize(scope_start_[kScopeCount] + layer);
  std::array<std::uint32_t, kScopeCount> next{};
  std::uint32_t next_layer = scope_start_[kScopeCount];
  for (std::uint32_t i = 0; i < step_.tensors.size(); ++i) {
    const Tensor& t = step_.tensors[i];
    if (!saved(t)) continue;
    const auto s = static_cast<std::size_t>(t.scope);
    lists_.by_scope[scope_start_[s] + next[s]++] = i;
    if (!in_layer(t)) continue;
    lists_.by_scope[next_layer++] = i;
    has_norm1_ = has_norm1_ || t.slot == Slot::norm1;
  }
}

// Parameters, master weights, the optimizer's states (sized by optimizer_sizes, which a plan
// for another optimizer resizes), the accumulation buffer, the inputs and buffers.
void Walker::model_state(const Inventory& inventory) {
  const auto& p = run_.precision;
  const Sharding& sh = residency_.sharding();
  param_bytes_ = parameter_bytes(inventory, p.param);
  state_.params = constant(
      "parameters", Part::params,
      fsdp_.on() && sh.params ? checked_mul(fsdp_.shards().param_bytes, sh.ranks) : param_bytes_);
  state_.master = constant("master weights", Part::master_params,
                           p.master ? checked_mul(width(*p.master), sums_.trainable) : 0);
  state_.optimizer_states = sized_later("optimizer states", Part::optimizer_state, 0);
  step_.states_tensor = state_.optimizer_states;
  optimizer_ = optimizer_sizes(run_, run_.optimizer, sums_, in_.cuda);
  resize_optimizer(step_, optimizer_);
  state_.grad_accum =
      constant("grad accumulation buffer", Part::grad_accum,
               p.grad_accum ? checked_mul(width(*p.grad_accum), sums_.trainable) : 0);
  state_.input_ids = temp("input ids (int64)", Part::inputs, 8, shape({sym::N}));
  state_.buffers = temp("rotary inv_freq buffer", Part::buffers, in_.ex,
                        shape({dim("d/2", in_.rotary ? in_.d / 2 : 0)}));
}

// The gradients: all of them, DDP's buckets, the master gradients the optimizer steps, and those
// of the head and of one layer (what backward has made so far when they are set to None).
void Walker::gradients() {
  const auto& p = run_.precision;
  const Sharding& sh = residency_.sharding();
  const u64 eg = width(p.grad);
  const u64 grads = fsdp_.on() && (sh.grads || fsdp_.no_sync())
                        ? checked_mul(fsdp_.shards().grads, sh.ranks)
                        : sums_.trainable;
  state_.grads = constant("gradients", Part::grads, checked_mul(eg, grads));
  // Allocated with the DDP reducer and kept for the whole run (torch/csrc/distributed/c10d/
  // reducer.cpp: each bucket's flat `gradients` tensor).
  state_.ddp_buckets =
      constant("DDP all-reduce buckets (a second copy of the gradients)", Part::other,
               run_.parallel.ddp_buckets() ? checked_mul(eg, sums_.trainable) : 0);
  residency_.not_a_step_temporary(state_.ddp_buckets);
  master_grads_ = p.master && width(p.grad) < width(*p.master);
  state_.optimizer_grads = master_grads_ ? constant("master gradients", Part::master_grads,
                                                    checked_mul(width(*p.master), sums_.trainable))
                                         : state_.grads;
  const u64 lm = in_.lm_head ? in_.V * in_.h : 0;
  u64 head_bytes = eg * (sums_.head_trainable + (tied_grad() ? lm : 0));
  u64 layer_bytes = eg * sums_.layer_trainable;
  if (fsdp_.no_sync()) fsdp_.unsharded_unit_grads(eg, sh, in_.L, head_bytes, layer_bytes);
  state_.head_grads =
      constant("gradients of the head (final norm, lm_head)", Part::grads, head_bytes);
  state_.layer_grads = constant("gradients of one layer", Part::grads, layer_bytes);
  // FSDP's sharded gradients are the reduce-scatter's output: FSDP1 allocates it under its
  // post-backward stream (_get_reduce_scatter_tensors), FSDP2 under its reduce-scatter stream
  // (foreach_reduce: reduce_output, whose views become the gradients).
  for (const std::uint32_t t : {state_.grads, state_.head_grads, state_.layer_grads}) {
    if (fsdp_.on() && sh.grads) step_.tensors[t].stream = Stream::fsdp_reduce;
  }
}

// Autocast's copies of one layer's weights, split by the backward op that releases them.
void Walker::weight_copies() {
  const u64 ew = in_.amp ? in_.ew : 0;
  const u64 I = in_.moe_layers == in_.L && in_.moe_layers ? in_.I_moe : in_.I;
  const u64 down = std::min(ew * I * in_.h, ew * sums_.layer_mlp_matmul);
  copies_.down = constant("autocast copy of the MLP down projection", Part::param_casts, down);
  copies_.other_mlp = constant("autocast copies of the other MLP weights", Part::param_casts,
                               ew * sums_.layer_mlp_matmul - down);
  copies_.o_proj =
      constant("autocast copy of o_proj", Part::param_casts, ew * sums_.layer_o_matmul);
  copies_.qkv = constant("autocast copies of the attention input projections", Part::param_casts,
                         ew * (sums_.layer_matmul - sums_.layer_mlp_matmul - sums_.layer_o_matmul));
}

// The loss and the backward seed, the rules' tensors that live as one (the model's output a
// training loop holds), checkpoint's RNG states and the gradient of a layer's output.
void Walker::scalars() {
  scalars_.loss = constant("loss (0-d fp32)", Part::other, 4);
  for (std::size_t i = 0; i < lists_.lived.size(); ++i) {
    if (lists_.lived[i].identity != Identity::one) continue;
    lists_.lived_ids[i] = add_tensor(step_, lists_.lived[i].tensor);
  }
  scalars_.backward_seed = constant("backward seed (ones_like of the loss)", Part::other, 4);
  // torch.utils.checkpoint keeps the CPU RNG state per layer; on CUDA it lives on the host.
  scalars_.rng_states = temp("checkpoint CPU RNG states", Part::other, kRngStateBytes,
                             shape({dim("L", checkpointed_layers() && !in_.cuda ? in_.L : 0)}));
  scalars_.output_gradient =
      temp("gradient of the layer output", Part::other, in_.ex, shape({tokens_, dims_.h}));
}

}  // namespace memest::detail
