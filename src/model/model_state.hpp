// Private to the core: the model and optimizer state a walk enters (src/model/model_state.cpp):
// the parameter layout, the order of the trainable tensors, the optimizer's states and the
// temporaries of its step.
#pragma once

#include <memest/activation.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>
#include <memest/run_spec.hpp>
#include <memest/step.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace memest::detail {

using u64 = std::uint64_t;

// The parameter layout the walk needs: per-layer sums and the order of the trainable tensors.
struct Layout {
  const Inventory* inv = nullptr;
  u64 L = 1;
  u64 trainable = 0;
  u64 mm_all = 0;   // matmul weights autocast copies (not QLoRA-stored ones)
  u64 bias_mm = 0;  // biases of matmul modules (cached by autocast during forward)
  u64 layer_trainable = 0, l_mlp = 0, l_down = 0, l_n2 = 0, l_o = 0, l_mm = 0, l_mm_mlp = 0,
      l_mm_o = 0, l_qkv = 0;
  u64 head_trainable = 0;   // groups after the layers (final norm, lm_head, pooler)
  u64 embed_trainable = 0;  // token embeddings before the layers (a tied lm_head's gradient)

  bool per_layer(const TensorGroup& g) const {
    return L > 1 && g.name.find('*') != std::string::npos && g.count % L == 0;
  }
};

/// The layout of the run's inventory (the canonical one for a bare count), with its exact
/// trainable count.
Layout layout_of(const RunSpec& run, const ActivationInputs& in);

// The stack a per-layer group belongs to: its name up to the layer index ("model.layers.").
inline std::string_view stack_of(const TensorGroup& g) {
  return std::string_view(g.name).substr(0, g.name.find('*'));
}

// Visits the trainable tensors in parameters() order: f(previous elements, elements, prefix
// through this tensor), once per distinct position, plus each stack's wrap-around pair. A
// stack is a run of groups named after one layer list ("model.layers.*...", "encoder.block.0...");
// its per-layer groups are visited in the last layer, which has the largest prefix; groups of
// the stack that are not in every layer (block 0's relative attention bias, DeepSeek's dense
// first layer and routed experts) are counted before it.
template <typename F>
void walk_order(const Layout& l, F&& f) {
  const auto& gs = l.inv->groups;
  const auto counts = [](const TensorGroup& g) { return g.trainable && !g.quant_state; };
  u64 prefix = 0, prev = 0;
  for (std::size_t i = 0; i < gs.size();) {
    if (!l.per_layer(gs[i])) {
      const TensorGroup& g = gs[i++];
      if (!counts(g)) continue;
      const u64 n = g.tensor_elements();
      f(prev, n, prefix + n);
      if (g.count > 1) f(n, n, prefix + g.count * n);
      prefix += g.count * n;
      prev = n;
      continue;
    }
    const std::string_view base = stack_of(gs[i]);
    std::size_t end = i;
    u64 per_layer = 0, other = 0;
    for (; end < gs.size() && std::string_view(gs[end].name).substr(0, base.size()) == base;
         ++end) {
      if (!counts(gs[end])) continue;
      (l.per_layer(gs[end]) ? per_layer : other) +=
          gs[end].elements() / (l.per_layer(gs[end]) ? l.L : 1);
    }
    u64 p = prefix;
    for (std::size_t k = i; k < end; ++k) {  // the groups not in every layer, counted first
      const TensorGroup& g = gs[k];
      if (!counts(g) || l.per_layer(g)) continue;
      const u64 n = g.tensor_elements();
      f(prev, n, p + n);
      if (g.count > 1) f(n, n, p + g.count * n);
      p += g.count * n;
      prev = n;
    }
    p += (l.L - 1) * per_layer;  // the last layer starts here
    u64 first = 0, last = 0;
    for (std::size_t k = i; k < end; ++k) {
      const TensorGroup& g = gs[k];
      if (!counts(g) || !l.per_layer(g)) continue;
      const u64 n = g.tensor_elements(), copies = g.count / l.L;
      f(prev, n, p + n);
      if (copies > 1) f(n, n, p + copies * n);
      p += copies * n;
      prev = n;
      if (first == 0) first = n;
      last = n;
    }
    if (l.L > 1) f(last, first, 0);
    prefix += other + l.L * per_layer;
    i = end;
  }
}

/// Optimizer state bytes (without step counters) for `trainable` elements in dtype `d`.
u64 state_bytes(const OptimizerSpec& o, const Inventory& inv, u64 trainable, Dtype d);
/// The canonical inventory of a bare parameter count (cached per thread).
const Inventory& canonical_inventory(u64 params);
/// The optimizer step's temporaries at its worst moment (§4.4), by implementation.
u64 step_temporaries(const OptimizerSpec& o, const Layout& lp, bool cuda, u64 es, u64 eg);
/// The sizes of the optimizer's tensors: its states, step counters and step temporaries.
struct OptimizerSizes {
  u64 state_bytes = 0, step_counter_bytes = 0, temporaries = 0;
  std::string_view temporaries_name;
  u64 paged_bytes = 0;  ///< a paged optimizer's states, in CUDA unified memory (not on the device)
};
OptimizerSizes optimizer_sizes(const RunSpec& run, const OptimizerSpec& optimizer,
                               const Layout& lay, bool cuda);
/// The temporaries of one tensor's step of n elements: the optimizer in backward steps each
/// parameter with its own optimizer (torchtune optimizer_in_bwd), so foreach spans one tensor.
u64 one_tensor_temporaries(const RunSpec& run, const OptimizerSpec& opt, u64 n, bool cuda);
/// Gives a built step's optimizer tensors these sizes.
void resize_optimizer(Step& step, const OptimizerSizes& sizes);

}  // namespace memest::detail
