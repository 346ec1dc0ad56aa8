// The model and optimizer state a walk enters: the sums of the parameters (per layer, the order
// of the trainable tensors), the optimizer's states (docs/activation-derivation.md §2.2) and the
// temporaries of its step (§4.4).
#include "model/model_state.hpp"

#include "model/optimizer_traits.hpp"

#include <memest/activation.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace memest::detail {
namespace {

void add_layer_group(ParameterSums& l, const TensorGroup& g, u64& layer_norms) {
  const u64 per = g.elements() / l.layers;
  const bool mlp = g.role == Role::mlp || g.role == Role::expert || g.role == Role::router;
  const std::string_view k = g.kind;  // a length check before any compare
  if (g.trainable) {  // the gradients a layer's backward makes: a frozen weight gets none
    l.layer_trainable += per;
    if (mlp) l.layer_mlp_trainable += per;
    if (k == "down") l.down_trainable += per / std::max<u64>(1, g.count / l.layers);
    if (k == "o") l.layer_o_trainable += per;
    if (g.role == Role::norm) layer_norms += per;
  }
  if (!g.matmul) return;
  l.layer_matmul += per;
  if (mlp) l.layer_mlp_matmul += per;
  if (k == "o") l.layer_o_matmul += per;
  if (k == "q" || k == "k" || k == "v" || k == "qkv" || k == "kv") l.layer_qkv_matmul += per;
}

// Whether each group has one share in each of `layers` layers (per_layer), its name searched
// once: the sums and the trainable order read it several times a group.
std::vector<char> listed_groups(const Inventory& inv, u64 layers) {
  std::vector<char> out(inv.groups.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = per_layer(inv.groups[i], layers) ? 1 : 0;
  return out;
}

// The sums of an inventory whose layer list has `layers` layers; `listed` from listed_groups.
// With `count_trainable`, its trainable elements as trainable_count counts them.
ParameterSums sum_parameters(const Inventory& inv, u64 layers, u64 norms_per_layer,
                             const std::vector<char>& listed, bool count_trainable) {
  ParameterSums l;
  l.inventory = &inv;
  l.layers = std::max<u64>(1, layers);
  bool seen_block = false;
  u64 layer_norms = 0;
  for (std::size_t i = 0; i < inv.groups.size(); ++i) {
    const TensorGroup& g = inv.groups[i];
    if (g.quant_state) continue;
    const u64 n = g.elements();
    if (count_trainable && g.trainable) l.trainable = checked_add(l.trainable, n);
    if (g.matmul && (!g.storage || g.role == Role::adapter)) l.autocast_weights += n;
    if (g.rows == 1 && !g.kind.empty()) l.matmul_biases += n;
    if (listed[i]) {
      seen_block = true;
      add_layer_group(l, g, layer_norms);
    } else if (seen_block && g.trainable) {
      l.head_trainable += n;
    } else if (!seen_block && g.trainable && g.role == Role::embedding) {
      l.embed_trainable += n;
    }
  }
  l.norm_trainable = layer_norms / std::max<u64>(1, norms_per_layer);
  return l;
}

// The trainable tensors in parameters() order: (previous elements, elements, prefix
// through this tensor), once per distinct position, plus each layer list's wrap-around pair. A
// layer list is a run of groups named after one list of layers ("model.layers.*...",
// "encoder.block.0..."); its per-layer groups are visited in the last layer, which has the
// largest prefix; groups of the list that are not in every layer (block 0's relative attention
// bias, DeepSeek's dense first layer and routed experts) are counted before it.
std::vector<OrderVisit> trainable_order(const ParameterSums& l, const std::vector<char>& listed) {
  const auto& gs = l.inventory->groups;
  std::vector<OrderVisit> out;
  out.reserve(2 * gs.size() + 1);
  const auto f = [&](u64 prev, u64 n, u64 prefix) { out.push_back({prev, n, prefix}); };
  const auto counts = [](const TensorGroup& g) { return g.trainable && !g.quant_state; };
  u64 prefix = 0, prev = 0;
  for (std::size_t i = 0; i < gs.size();) {
    if (!listed[i]) {
      const TensorGroup& g = gs[i++];
      if (!counts(g)) continue;
      const u64 n = g.tensor_elements();
      f(prev, n, prefix + n);
      if (g.count > 1) f(n, n, prefix + g.count * n);
      prefix += g.count * n;
      prev = n;
      continue;
    }
    const std::string_view base = layer_list_of(gs[i]);
    std::size_t end = i;
    u64 per_layer = 0, other = 0;
    for (; end < gs.size() && std::string_view(gs[end].name).starts_with(base); ++end) {
      if (!counts(gs[end])) continue;
      const bool each = listed[end];
      (each ? per_layer : other) += gs[end].elements() / (each ? l.layers : 1);
    }
    u64 p = prefix;
    for (std::size_t k = i; k < end; ++k) {  // the groups not in every layer, counted first
      const TensorGroup& g = gs[k];
      if (!counts(g) || listed[k]) continue;
      const u64 n = g.tensor_elements();
      f(prev, n, p + n);
      if (g.count > 1) f(n, n, p + g.count * n);
      p += g.count * n;
      prev = n;
    }
    p += (l.layers - 1) * per_layer;  // the last layer starts here
    u64 first = 0, last = 0;
    for (std::size_t k = i; k < end; ++k) {
      const TensorGroup& g = gs[k];
      if (!counts(g) || !listed[k]) continue;
      const u64 n = g.tensor_elements(), copies = g.count / l.layers;
      f(prev, n, p + n);
      if (copies > 1) f(n, n, p + copies * n);
      p += copies * n;
      prev = n;
      if (first == 0) first = n;
      last = n;
    }
    if (l.layers > 1) f(last, first, 0);
    prefix += other + l.layers * per_layer;
    i = end;
  }
  return out;
}

}  // namespace

// The states of an elementwise optimizer are its state count times `trainable` elements (FSDP's
// padded shards included); the shaped ones (Adafactor, 8-bit Adam) follow the tensors.
u64 state_bytes(const OptimizerSpec& o, const Inventory& inv, u64 trainable, Dtype d) {
  if (traits_of(o.kind).shape != StateShape::elementwise)
    return optimizer_bytes(o, inv, d).state_bytes;
  return checked_mul(elementwise_states(o) * width(d), trainable);
}

// The optimizer step's temporaries at its worst moment (§4.4), over the trainable tensors in
// the order the step visits them.
u64 step_temporaries(const OptimizerSpec& o, const ParameterSums& sums, bool cuda, u64 es, u64 eg) {
  StepShape t;
  t.group = sums.trainable;
  walk_order(sums, [&](u64 prev, u64 n, u64) {
    t.pair2 = std::max(t.pair2, 2 * n + prev);
    t.pair1 = std::max(t.pair1, n + prev);
    t.largest = std::max(t.largest, n);
  });
  return temporaries_bytes(o, cuda ? o.impl : OptimizerImpl::single, t, es, eg);
}

const Inventory& walk_inventory(const RunSpec& run) {
  const ModelSpec& m = run.model;
  if (m.inventory.shapes_known) return m.inventory;
  if (m.canonical_inventory.groups.empty())
    throw std::logic_error("a bare parameter count without its canonical inventory");
  return m.canonical_inventory;
}

ParameterSums parameter_sums(const RunSpec& run, const ActivationInputs& in) {
  const u64 layers = run.model.arch ? run.model.arch->num_layers : in.L;
  const Inventory& inv = walk_inventory(run);
  const std::vector<char> listed = listed_groups(inv, std::max<u64>(1, layers));
  // The trainable count is the run's inventory's, exact even when shapes are assumed (the
  // canonical inventory summed): counted while summing when the two are one.
  const bool own = &inv == &run.model.inventory;
  ParameterSums sums = sum_parameters(inv, layers, in.norms, listed, own);
  if (!own) sums.trainable = trainable_count(run.model.inventory);
  sums.order = trainable_order(sums, listed);
  return sums;
}

// The optimizer's states and step counters (§2.2) and its step's temporaries (§4.4).
OptimizerSizes optimizer_sizes(const RunSpec& run, const OptimizerSpec& opt,
                               const ParameterSums& sums, bool cuda) {
  const auto& inv0 = run.model.inventory;
  const bool steps_on_device = opt.impl == OptimizerImpl::fused || !cuda;
  OptimizerSizes sizes;
  sizes.state_bytes = state_bytes(opt, inv0, sums.trainable, run.precision.state);
  const OptimizerTraits& traits = traits_of(opt.kind);
  sizes.step_counter_bytes = traits.step_counter && inv0.shapes_known && steps_on_device
                                 ? 4 * trainable_tensor_count(inv0)
                                 : 0;
  sizes.temporaries =
      step_temporaries(opt, sums, cuda, width(run.precision.state), width(run.precision.grad));
  sizes.temporaries_name = traits.temporaries_name;
  if (opt.paged && traits.pageable) {  // bitsandbytes: one fused kernel per tensor, `step` an int
    sizes.paged_bytes = paged_state_bytes(opt, inv0, run.precision.state);
    sizes.state_bytes -= std::min(sizes.state_bytes, sizes.paged_bytes);
    sizes.step_counter_bytes = 0;
    sizes.temporaries = 0;
  }
  return sizes;
}

u64 one_tensor_temporaries(const RunSpec& run, const OptimizerSpec& opt, u64 n, bool cuda) {
  if (opt.paged && traits_of(opt.kind).pageable) return 0;  // bitsandbytes: one kernel a tensor
  return temporaries_bytes(opt, cuda ? opt.impl : OptimizerImpl::single, StepShape{2 * n, n, n, n},
                           width(run.precision.state), width(run.precision.grad));
}

void resize_optimizer(Step& step, const OptimizerSizes& sizes) {
  step.state_bytes = sizes.state_bytes;
  step.step_counter_bytes = sizes.step_counter_bytes;
  const auto set = [](Tensor& t, u64 bytes) {
    t.width = bytes;
    t.bytes = Poly{};
    t.bytes.c[0] = bytes;
    t.mono = bytes ? 0 : -1;
  };
  set(step.tensors[step.states_tensor], checked_add(sizes.state_bytes, sizes.step_counter_bytes));
  for (const std::uint32_t id : step.step_temporaries) {
    set(step.tensors[id], sizes.temporaries);
    step.tensors[id].name = sizes.temporaries_name;
  }
}

}  // namespace memest::detail
