// PyTorch FSDP in the walk (docs/parallelism.md, "FSDP"): the units all-gathered at each moment,
// the reduce-scatter of each layer unit's gradient after its backward, and no_sync() over an
// accumulation. The rows' shards, with their padding, come from src/parallel/fsdp.cpp.
#include "step/walk.hpp"

#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {

FsdpWalk::FsdpWalk(const RunSpec& run, const Sharding& sharding) : run_(run) {
  on_ = run.parallel.fsdp_version > 0 && (sharding.params || sharding.grads);
  // FSDP's no_sync(): the micro-batches of an accumulation reduce nothing, so the gradients
  // stay whole (each unit's flat gradient) between them and no reduce-scatter runs.
  no_sync_ = on_ && sharding.grads && run.parallel.fsdp_no_sync && run.training.grad_accum > 1;
  reduces_ = on_ && sharding.grads && !no_sync_;
}

void FsdpWalk::create_tensors(Step& step, const Sharding& sharding) {
  if (!on_) return;
  const auto& par = run_.parallel;
  const Dtype gathered = par.fsdp_param_dtype.value_or(run_.precision.param);
  shards_ = fsdp_shards_of(run_);
  unsharded_width_ = width(gathered);
  reduce_width_ = width(par.fsdp_reduce_dtype.value_or(gathered));
  const bool v2 = par.fsdp_version == 2;
  const auto in_flight = [&](std::string_view name, u64 bytes) {
    return add_constant(step, name, Part::other, Scope::transient, bytes);
  };
  root_ = in_flight(
      "FSDP root unit all-gathered (embeddings, final norm, head; not resharded after forward)",
      sharding.params ? shards_.root_bytes : 0);
  unit_ = in_flight("FSDP layer unit all-gathered (unsharded parameters, param_dtype)",
                    sharding.params ? shards_.layer_bytes : 0);
  all_gather_ =
      in_flight("FSDP2 all-gather output of a layer unit (flat, before or after copy-out)",
                v2 && sharding.params ? shards_.layer_bytes : 0);
  reduce_scatter_held_ = in_flight(
      "FSDP2 reduce-scatter input of the unit after (reduce_dtype, held until the next one)",
      v2 ? checked_mul(reduce_width_, shards_.layer_trainable) : 0);
  // FSDP1 all-gathers into the unsharded flat parameters under its unshard stream
  // (_runtime_utils._unshard); FSDP2 allocates the flat all-gather output under its copy-in
  // stream (foreach_all_gather) and copies it out on the default stream.
  for (const std::uint32_t t : v2 ? std::vector{all_gather_} : std::vector{root_, unit_})
    step.tensors[t].stream = Stream::fsdp_all_gather;
}

void FsdpWalk::unsharded_unit_grads(u64 grad_width, const Sharding& sharding, u64 layers, u64& head,
                                    u64& layer) const {
  const u64 all = checked_mul(shards_.grads, sharding.ranks);
  const u64 in_layers = checked_mul(shards_.layer_trainable, layers);
  layer = checked_mul(grad_width, shards_.layer_trainable);
  head = checked_mul(grad_width, all - std::min(all, in_layers));
}

// The FSDP units all-gathered at a moment. The root is gathered first and kept to the end of
// backward (FSDP1 _post_forward_reshard skips the root; FSDP2's _lazy_init clears its
// post-forward mesh). A layer unit is freed after its forward unless SHARD_GRAD_OP, and after its
// backward; backward prefetches the unit before it: FSDP1's BACKWARD_PRE (the default) issues it
// in the pre-backward hook, FSDP2's pre_backward calls _prefetch_unshard, whose flat all-gather
// output is copied out only when that unit starts. FSDP2 keeps a unit's flat all-gather output in
// forward until the next all-gather (all_gather_state) and the last reduce-scatter input in
// backward until the next (reduce_scatter_state). The timeline's in-layer backward moments
// (LayerAt::each) have no layer unit, as they have had since the timeline was added.
void FsdpWalk::gathered(MomentWriter& writer, u64 layers) const {
  const MomentId id = writer.current();
  const bool v2 = run_.parallel.fsdp_version == 2;
  const bool raf = run_.parallel.reshard_after_forward();
  writer.add(root_);
  u64 units = 0, flat = 0;
  switch (id.kind) {
    case MomentKind::forward_attention:
      units = raf ? 1 : layers;
      flat = v2 ? 1 : 0;
      break;
    case MomentKind::forward_end:
      units = raf ? 0 : layers;
      break;
    case MomentKind::backward_start:  // FSDP2's root prefetches the last layer
      units = raf ? 0 : layers;
      flat = v2 && raf ? 1 : 0;
      break;
    case MomentKind::backward_end:  // the first layer's reduce-scatter input
      writer.add(reduce_scatter_held_);
      break;
    case MomentKind::backward_mlp:
    case MomentKind::layer_step_in_backward:
    case MomentKind::backward_attention:
    case MomentKind::post_backward: {
      if (id.at != LayerAt::last && id.at != LayerAt::first) break;
      const u64 j = id.at == LayerAt::first ? 0 : layers - 1;
      units = raf ? 1 : j + 1;
      if (raf && j > 0) ++(v2 ? flat : units);
      if (j + 1 < layers && id.kind != MomentKind::post_backward) writer.add(reduce_scatter_held_);
      break;
    }
    default:
      break;
  }
  writer.add(unit_, units);
  writer.add(all_gather_, flat);
}

// FSDP's post-backward of a layer unit: its saved tensors are released and its unsharded
// gradient is reduced. FSDP1 (_post_backward_hook): autograd has copied the views' gradients into
// the flat gradient, which is cast to reduce_dtype when that differs; FSDP2 (foreach_reduce):
// the gradients are copied into one reduce-scatter input in reduce_dtype.
void FsdpWalk::post_backward(Step& step, MomentWriter& writer,
                             const std::function<void()>& open) const {
  if (!reduces_) return;
  const u64 n = shards_.layer_trainable;
  const auto in_flight = [&](std::string_view name, Part part, u64 bytes) {
    return add_constant(step, name, part, Scope::transient, bytes);
  };
  const std::uint32_t grads = in_flight("unsharded gradient of the layer unit (param_dtype)",
                                        Part::grads, unsharded_width_ * n);
  const auto start = [&] {
    open();
    writer.add(grads);
  };
  if (run_.parallel.fsdp_version == 2) {
    start();
    writer.add(
        in_flight("FSDP2 reduce-scatter input (reduce_dtype)", Part::other, reduce_width_ * n));
    writer.end();
    return;
  }
  start();
  writer.add(in_flight("gradients of the unit's parameter views (before the flat copy)",
                       Part::grads, unsharded_width_ * n));
  writer.end();
  if (reduce_width_ == unsharded_width_) return;
  start();
  // Cast under the post-backward stream (_post_backward_hook).
  const std::uint32_t cast =
      in_flight("flat gradient cast to reduce_dtype", Part::other, reduce_width_ * n);
  step.tensors[cast].stream = Stream::fsdp_reduce;
  writer.add(cast);
  writer.end();
}

}  // namespace memest::detail
