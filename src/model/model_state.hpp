// Private to the core: the model and optimizer state a walk enters (src/model/model_state.cpp):
// the sums of the parameters it reads, the order of the trainable tensors, the optimizer's
// states and the temporaries of its step.
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

/// Whether `g` has one share in each of `layers` layers: a "layers.*" name and a count that is
/// a multiple of them (more than one).
inline bool per_layer(const TensorGroup& g, u64 layers) {
  return layers > 1 && g.count % layers == 0 && g.name.find('*') != std::string::npos;
}

/// The sums of parameter elements the walk sizes its model-state tensors by. The layer_* sums
/// are one layer's.
struct ParameterSums {
  const Inventory* inventory = nullptr;  ///< the inventory summed, in step order
  u64 layers = 1;
  u64 trainable = 0;
  u64 autocast_weights = 0;  ///< matmul weights autocast copies (not the QLoRA-stored ones)
  u64 matmul_biases = 0;     ///< biases of matmul modules (autocast caches them in forward)
  // The gradients one layer's backward makes (a frozen weight gets none).
  u64 layer_trainable = 0;
  u64 layer_mlp_trainable = 0;  ///< the MLP's, routed experts and router included
  u64 layer_o_trainable = 0;    ///< the attention output projection's
  u64 down_trainable = 0;       ///< one down projection's (one expert's)
  u64 norm_trainable = 0;       ///< one of the layer's norms
  // One layer's matmul weights (what autocast copies).
  u64 layer_matmul = 0;
  u64 layer_mlp_matmul = 0;  ///< the MLP's, routed experts and router included
  u64 layer_o_matmul = 0;    ///< the attention output projection's
  u64 layer_qkv_matmul = 0;  ///< the q, k and v projections' (fused or not)
  u64 head_trainable = 0;    ///< groups after the layers (final norm, lm_head, pooler)
  u64 embed_trainable = 0;   ///< token embeddings before the layers (a tied lm_head's gradient)

  bool per_layer(const TensorGroup& g) const { return detail::per_layer(g, layers); }
};

/// The inventory the walk reads: the run's, or for a bare parameter count the canonical one it
/// holds (ModelSpec::canonical_inventory).
const Inventory& walk_inventory(const RunSpec& run);

/// The sums of the run's walk inventory, with its exact trainable count.
ParameterSums parameter_sums(const RunSpec& run, const ActivationInputs& in);

/// The layer list a per-layer group belongs to: its name up to the layer index
/// ("model.layers.").
inline std::string_view layer_list_of(const TensorGroup& g) {
  return std::string_view(g.name).substr(0, g.name.find('*'));
}

// Visits the trainable tensors in parameters() order: f(previous elements, elements, prefix
// through this tensor), once per distinct position, plus each layer list's wrap-around pair. A
// layer list is a run of groups named after one list of layers ("model.layers.*...",
// "encoder.block.0..."); its per-layer groups are visited in the last layer, which has the
// largest prefix; groups of the list that are not in every layer (block 0's relative attention
// bias, DeepSeek's dense first layer and routed experts) are counted before it.
template <typename F>
void walk_order(const ParameterSums& l, F&& f) {
  const auto& gs = l.inventory->groups;
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
    const std::string_view base = layer_list_of(gs[i]);
    std::size_t end = i;
    u64 per_layer = 0, other = 0;
    for (; end < gs.size() && std::string_view(gs[end].name).substr(0, base.size()) == base;
         ++end) {
      if (!counts(gs[end])) continue;
      (l.per_layer(gs[end]) ? per_layer : other) +=
          gs[end].elements() / (l.per_layer(gs[end]) ? l.layers : 1);
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
    p += (l.layers - 1) * per_layer;  // the last layer starts here
    u64 first = 0, last = 0;
    for (std::size_t k = i; k < end; ++k) {
      const TensorGroup& g = gs[k];
      if (!counts(g) || !l.per_layer(g)) continue;
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
}

/// Optimizer state bytes (without step counters) for `trainable` elements in dtype `d`.
u64 state_bytes(const OptimizerSpec& o, const Inventory& inv, u64 trainable, Dtype d);
/// The optimizer step's temporaries at its worst moment (§4.4), by implementation.
u64 step_temporaries(const OptimizerSpec& o, const ParameterSums& sums, bool cuda, u64 es, u64 eg);
/// The sizes of the optimizer's tensors: its states, step counters and step temporaries.
struct OptimizerSizes {
  u64 state_bytes = 0, step_counter_bytes = 0, temporaries = 0;
  std::string_view temporaries_name;
  u64 paged_bytes = 0;  ///< a paged optimizer's states, in CUDA unified memory (not on the device)
};
OptimizerSizes optimizer_sizes(const RunSpec& run, const OptimizerSpec& optimizer,
                               const ParameterSums& sums, bool cuda);
/// The temporaries of one tensor's step of n elements: the optimizer in backward steps each
/// parameter with its own optimizer (torchtune optimizer_in_bwd), so foreach spans one tensor.
u64 one_tensor_temporaries(const RunSpec& run, const OptimizerSpec& opt, u64 n, bool cuda);
/// Gives a built step's optimizer tensors these sizes.
void resize_optimizer(Step& step, const OptimizerSizes& sizes);

}  // namespace memest::detail
