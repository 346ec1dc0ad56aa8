// The model and optimizer state a walk enters: the parameter layout (per-layer sums, the order
// of the trainable tensors), the optimizer's states (docs/activation-derivation.md §2.2) and the
// temporaries of its step (§4.4).
#include "model/model_state.hpp"

#include "step/step_build.hpp"

#include <memest/activation.hpp>
#include <memest/units.hpp>

#include <algorithm>

namespace memest::detail {
namespace {

void add_layer_group(Layout& l, const TensorGroup& g, u64& layer_norms) {
  const u64 per = g.elements() / l.L;
  const bool mlp = g.role == Role::mlp || g.role == Role::expert || g.role == Role::router;
  if (g.trainable) {  // the gradients a layer's backward makes: a frozen weight gets none
    l.layer_trainable += per;
    if (mlp) l.l_mlp += per;
    if (g.kind == "down") l.l_down += per / std::max<u64>(1, g.count / l.L);
    if (g.kind == "o") l.l_o += per;
    if (g.role == Role::norm) layer_norms += per;
  }
  if (!g.matmul) return;
  l.l_mm += per;
  if (mlp) l.l_mm_mlp += per;
  if (g.kind == "o") l.l_mm_o += per;
  if (g.kind == "q" || g.kind == "k" || g.kind == "v" || g.kind == "qkv" || g.kind == "kv")
    l.l_qkv += per;
}

}  // namespace

namespace {

// The layout of an inventory whose layer list has `layers` layers.
Layout layout(const Inventory& inv, u64 layers, u64 norms_per_layer) {
  Layout l;
  l.inv = &inv;
  l.L = std::max<u64>(1, layers);
  bool seen_block = false;
  u64 layer_norms = 0;
  for (const auto& g : inv.groups) {
    if (g.quant_state) continue;
    const u64 n = g.elements();
    if (g.matmul && !g.storage) l.mm_all += n;
    if (g.rows == 1 && !g.kind.empty()) l.bias_mm += n;
    if (l.per_layer(g)) {
      seen_block = true;
      add_layer_group(l, g, layer_norms);
    } else if (seen_block && g.trainable) {
      l.head_trainable += n;
    } else if (!seen_block && g.trainable && g.role == Role::embedding) {
      l.embed_trainable += n;
    }
  }
  l.l_n2 = layer_norms / std::max<u64>(1, norms_per_layer);
  return l;
}

}  // namespace

// States per trainable element for the optimizers whose state is elementwise.
u64 state_bytes(const OptimizerSpec& o, const Inventory& inv, u64 trainable, Dtype d) {
  u64 n = 0;
  switch (o.kind) {
    case OptimizerKind::sgd:
      return 0;
    case OptimizerKind::sgd_momentum:
    case OptimizerKind::adagrad:
    case OptimizerKind::lion:
      n = 1;
      break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      n = o.amsgrad ? 3 : 2;
      break;
    case OptimizerKind::rmsprop:
      n = 1 + (o.momentum ? u64{1} : 0) + (o.centered ? u64{1} : 0);
      break;
    case OptimizerKind::adafactor:
    case OptimizerKind::adam8bit:
      return optimizer_bytes(o, inv, d).state_bytes;
  }
  return checked_mul(n * width(d), trainable);
}

bool keeps_step(OptimizerKind k) {
  return k == OptimizerKind::adam || k == OptimizerKind::adamw || k == OptimizerKind::adagrad ||
         k == OptimizerKind::rmsprop;
}

const Inventory& canonical_inventory(u64 params) {
  // Searches over batch and sequence call this with one count many times.
  thread_local u64 cached_params = 0;
  thread_local Inventory cached;
  if (cached_params != params || cached.groups.empty()) {
    cached = build_inventory(canonical_architecture(params));
    cached_params = params;
  }
  return cached;
}

// The optimizer step's temporaries at its worst moment (§4.4), by implementation: foreach
// holds a whole group's intermediate, single-tensor two of the largest, fused none.
// The sizes a step's temporaries follow: the largest 2n + previous and n + previous over the
// tensors in step order, the largest tensor, and all the group's elements.
struct StepShape {
  u64 pair2 = 0, pair1 = 0, nmax = 0, all = 0;
};

u64 temporaries_of(const OptimizerSpec& o, const StepShape& t, bool cuda, u64 es, u64 eg) {
  const bool fused = cuda && o.impl == OptimizerImpl::fused;
  const bool foreach = cuda && o.impl == OptimizerImpl::foreach;
  const u64 pair2 = t.pair2, pair1 = t.pair1, nmax = t.nmax;
  switch (o.kind) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return fused ? 0 : foreach ? es * t.all : es * pair2 + 8 + es;
    case OptimizerKind::adagrad:
      return fused ? 0 : foreach ? es * t.all : es * pair1 + 8 + es;
    case OptimizerKind::rmsprop:
      return fused     ? 0
             : foreach ? (o.centered ? 2 : 1) * es * t.all
                       : std::max(es * pair1, es * nmax + 8 + es);
    case OptimizerKind::sgd:
      return 0;
    case OptimizerKind::sgd_momentum:
      return foreach && o.nesterov ? eg * t.all : 0;
    case OptimizerKind::lion:
      return 2 * es * nmax;
    case OptimizerKind::adafactor:
      return u64{8} * nmax;  // two fp32 factored-update buffers
    case OptimizerKind::adam8bit:
      return 0;
  }
  return 0;
}

u64 step_temporaries(const OptimizerSpec& o, const Layout& lp, bool cuda, u64 es, u64 eg) {
  StepShape t;
  t.all = lp.trainable;
  walk_order(lp, [&](u64 prev, u64 n, u64) {
    t.pair2 = std::max(t.pair2, 2 * n + prev);
    t.pair1 = std::max(t.pair1, n + prev);
    t.nmax = std::max(t.nmax, n);
  });
  return temporaries_of(o, t, cuda, es, eg);
}

std::string_view step_temporaries_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      return "Adam step: exp_avg_sq.sqrt() and the quotient (denom)";
    case OptimizerKind::adagrad:
      return "Adagrad step: state_sum.sqrt() (this tensor's and the previous)";
    case OptimizerKind::rmsprop:
      return "RMSprop step: square_avg.sqrt() (this tensor's and the previous)";
    case OptimizerKind::sgd_momentum:
      return "SGD step: Nesterov look-ahead (one per gradient)";
    case OptimizerKind::lion:
      return "Lion step: interpolated update and its sign (largest tensor)";
    case OptimizerKind::adafactor:
      return "Adafactor step: factored update buffers (fp32, largest tensor)";
    default:
      return "optimizer step temporaries";
  }
}

const Inventory& walk_inventory(const RunSpec& run) {
  const auto& inv0 = run.model.inventory;
  return inv0.shapes_known ? inv0 : canonical_inventory(parameter_count(inv0));
}

Layout layout_of(const RunSpec& run, const ActivationInputs& in) {
  const u64 layers = run.model.arch ? run.model.arch->num_layers : in.L;
  Layout lay = layout(walk_inventory(run), layers, in.norms);
  lay.trainable = trainable_count(run.model.inventory);  // exact even when shapes are assumed
  return lay;
}

// The optimizer's states and step counters (§2.2) and its step's temporaries (§4.4).
OptimizerSizes optimizer_sizes(const RunSpec& run, const OptimizerSpec& opt, const Layout& lay,
                               bool cuda) {
  const auto& inv0 = run.model.inventory;
  const bool steps_on_device = opt.impl == OptimizerImpl::fused || !cuda;
  OptimizerSizes sizes;
  sizes.state_bytes = state_bytes(opt, inv0, lay.trainable, run.precision.state);
  sizes.step_counter_bytes = keeps_step(opt.kind) && inv0.shapes_known && steps_on_device
                                 ? 4 * trainable_tensor_count(inv0)
                                 : 0;
  sizes.temporaries =
      step_temporaries(opt, lay, cuda, width(run.precision.state), width(run.precision.grad));
  sizes.temporaries_name = step_temporaries_name(opt.kind);
  if (opt.paged) {  // bitsandbytes: one fused kernel per tensor, `step` a Python int
    sizes.paged_bytes = paged_state_bytes(opt, inv0, run.precision.state);
    sizes.state_bytes -= std::min(sizes.state_bytes, sizes.paged_bytes);
    sizes.step_counter_bytes = 0;
    sizes.temporaries = 0;
  }
  return sizes;
}

u64 one_tensor_temporaries(const RunSpec& run, const OptimizerSpec& opt, u64 n, bool cuda) {
  if (opt.paged) return 0;  // bitsandbytes steps each tensor in one kernel
  return temporaries_of(opt, StepShape{2 * n, n, n, n}, cuda, width(run.precision.state),
                        width(run.precision.grad));
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
