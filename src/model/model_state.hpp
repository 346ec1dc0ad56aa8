// Private to the core: the model and optimizer state a walk enters (src/model/model_state.cpp):
// the sums of the parameters it reads, the order of the trainable tensors, the optimizer's
// states and the temporaries of its step.
#pragma once

#include <memest/activation.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>
#include <memest/run_spec.hpp>
#include <memest/step.hpp>
#include <memest/units.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace memest::detail {

/// Whether `g` has one share in each of `layers` layers: a "layers.*" name and a count that is
/// a multiple of them (more than one).
inline bool per_layer(const TensorGroup& g, u64 layers) {
  return layers > 1 && g.count % layers == 0 && g.name.find('*') != std::string::npos;
}

/// One position of the trainable tensors in parameters() order (walk_order).
struct OrderVisit {
  u64 prev = 0, n = 0, prefix = 0;
};

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
  /// The trainable tensors in parameters() order, as walk_order visits them: taken once, read
  /// by the optimizer step's temporaries and the walk's grad_copy.
  std::vector<OrderVisit> order;

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

/// Visits the trainable tensors in parameters() order: f(previous elements, elements, prefix
/// through this tensor), once per distinct position, plus each layer list's wrap-around pair (the
/// visits parameter_sums took once: ParameterSums::order; src/model/model_state.cpp says how).
template <typename F>
void walk_order(const ParameterSums& l, F&& f) {
  for (const OrderVisit& v : l.order) f(v.prev, v.n, v.prefix);
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
