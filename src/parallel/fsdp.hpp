#pragma once

#include <memest/dtype.hpp>
#include <memest/model.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memest {

struct RunSpec;

/// What one rank holds of a model under PyTorch FSDP (docs/parallelism.md, "FSDP"). The model is
/// wrapped as one unit per transformer layer and the root unit for the rest (embeddings, final
/// norm, head): transformer_auto_wrap_policy for FSDP1, fully_shard per block and then on the
/// model for FSDP2 (torchtitan's parallelize_llama). FSDP1 flattens each unit into flat
/// parameters, frozen and trainable apart (use_orig_params=False needs uniform requires_grad;
/// fsdp_qlora and torchtune wrap LoRA adapters as their own units), each padded to a multiple of
/// the ranks (torch/distributed/fsdp/_flat_param.py, FlatParamHandle._get_shard: the flat tensor
/// is chunked into `ranks` pieces of ceil(n / ranks)). FSDP2 shards each parameter on dim 0,
/// padded to a multiple of the ranks (_fsdp_param.py, padded_sharded_param_size).
struct FsdpShards {
  std::uint64_t param_bytes = 0;  ///< one rank's parameter shards, stored dtype, padded
  std::uint64_t trainable = 0;    ///< one rank's trainable elements (optimizer states), padded
  /// One rank's gradient elements, padded: the trainable ones, or with FSDP1's
  /// use_orig_params=True the whole flat parameter of every unit with a trainable parameter.
  std::uint64_t grads = 0;
  std::uint64_t layer_bytes = 0;      ///< one layer unit all-gathered, in the gather dtype, padded
  std::uint64_t layer_trainable = 0;  ///< elements of one layer unit's unsharded gradient, padded
  std::uint64_t root_bytes = 0;       ///< the root unit all-gathered, in the gather dtype, padded
  std::uint64_t padding = 0;          ///< elements of padding over all ranks and units
};

/// FSDP version 1 or 2 over `ranks`, for an inventory whose per-layer groups ("layers.*...")
/// repeat `layers` times. Parameters are stored in `stored` (a group's own storage dtype wins)
/// and all-gathered in `gathered` (MixedPrecision's param_dtype). `orig_params`: FSDP1's
/// use_orig_params=True, one flat parameter per unit, frozen and trainable together.
FsdpShards fsdp_shards(const Inventory& inventory, std::uint64_t layers, unsigned version,
                       std::uint64_t ranks, Dtype stored, Dtype gathered, bool orig_params = false);

/// One FSDP1 flat parameter as FSDP's constructor builds it: the bytes of each original
/// parameter tensor in parameters() order, in their stored dtype, and one rank's padded shard
/// (NO_SHARD: the flat parameter itself, kept whole).
struct FsdpFlatParam {
  std::vector<std::uint64_t> tensors;
  std::uint64_t shard_bytes = 0;
  bool sharded = true;
};

/// FSDP1's flat parameters in the order auto-wrapping builds them, innermost unit first: layer
/// by layer its trainable flat parameter (the adapters, wrapped as units of their own, are
/// children of the layer), then its frozen one; then the root's frozen and trainable ones. With
/// `orig_params` a unit has one. Their shards sum to fsdp_shards' param_bytes.
std::vector<FsdpFlatParam> fsdp1_flat_params(const Inventory& inventory, std::uint64_t layers,
                                             std::uint64_t ranks, Dtype stored, bool orig_params);

/// The run's FSDP1 flat parameters: its inventory, layers, shard group and orig_params, as
/// fsdp_shards_of reads them; whole under NO_SHARD.
std::vector<FsdpFlatParam> fsdp1_flat_params_of(const RunSpec& run);

/// The run's shards: its inventory (the canonical one for a bare count), its layers, its
/// ParallelSpec's version, shard group and param_dtype.
FsdpShards fsdp_shards_of(const RunSpec& run);

/// "FSDP1 FULL_SHARD", "FSDP2 fully_shard (HSDP: shard 8, replicate 2)", ...: how the run shards.
std::string fsdp_label(const RunSpec& run);

}  // namespace memest
