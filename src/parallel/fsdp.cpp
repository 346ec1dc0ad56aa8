// FSDP's units and shards (src/parallel/fsdp.hpp, docs/parallelism.md "FSDP"): per-rank
// shards with their padding, and the all-gathered size of a unit.
#include "parallel/fsdp.hpp"

#include "model/model_state.hpp"
#include "step/step_build.hpp"

#include <memest/activation.hpp>
#include <memest/run_spec.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <numeric>

namespace memest {
namespace {

// One FSDP1 flat parameter: its bytes in the stored and the gathered dtype, its elements when
// trainable.
struct Flat {
  u64 stored = 0, gathered = 0, trainable = 0;
};

// Whether a group's tensors go into a unit's trainable flat parameter: FSDP1 with
// use_orig_params=False needs uniform requires_grad in a flat parameter; with it, one per unit.
bool trainable_flat(const TensorGroup& g, bool orig) {
  return orig || (g.trainable && !g.quant_state);
}

// A group's bytes for `n` of its elements, in its own storage dtype or `d`.
u64 group_bytes(const TensorGroup& g, u64 n, Dtype d) {
  return bytes_for(g.storage.value_or(d), n);
}

// The FSDP unit a flat parameter belongs to: every layer's own, or the root's.
enum class FlatUnit : std::uint8_t { layer, root };

// FSDP1: the flat parameters of one unit are padded to a multiple of the ranks: a rank holds
// ceil(n / ranks) elements of each (FlatParamHandle._get_shard).
void add_flat(FsdpShards& s, const Flat& f, u64 copies, u64 W, Dtype stored, Dtype gathered,
              FlatUnit unit) {
  const bool layer = unit == FlatUnit::layer;
  if (f.stored == 0) return;
  const u64 ws = width(stored), wg = width(gathered);
  const u64 shard_elems = ceil_div(ceil_div(f.stored, ws), W);
  s.param_bytes = checked_add(s.param_bytes, checked_mul(copies, shard_elems * ws));
  s.padding += copies * (shard_elems * W - ceil_div(f.stored, ws));
  const u64 gathered_bytes = checked_mul(W, ceil_div(ceil_div(f.gathered, wg), W) * wg);
  (layer ? s.layer_bytes : s.root_bytes) += gathered_bytes;
  if (f.trainable == 0) return;
  const u64 tr = ceil_div(f.trainable, W);
  s.trainable = checked_add(s.trainable, checked_mul(copies, tr));
  // The flat gradient covers the whole flat parameter, frozen parts included.
  const u64 grad = f.trainable == ceil_div(f.stored, ws) ? tr : shard_elems;
  s.grads = checked_add(s.grads, checked_mul(copies, grad));
  if (layer) s.layer_trainable += grad * W;
}

FsdpShards flat_shards(const Inventory& inv, u64 L, u64 W, Dtype stored, Dtype gathered,
                       bool orig) {
  const u64 layers = std::max<u64>(1, L);
  // [frozen, trainable] flat parameters of a layer unit and of the root unit.
  std::array<Flat, 2> layer{}, root{};
  for (const auto& g : inv.groups) {
    const bool per_layer = detail::per_layer(g, layers);
    const u64 copies = per_layer ? g.count / layers : g.count;
    const u64 n = checked_mul(g.tensor_elements(), copies);
    Flat& f = (per_layer ? layer : root)[trainable_flat(g, orig) ? 1 : 0];
    f.stored += checked_mul(group_bytes(g, g.tensor_elements(), stored), copies);
    f.gathered += checked_mul(group_bytes(g, g.tensor_elements(), gathered), copies);
    if (g.trainable && !g.quant_state) f.trainable += n;
  }
  FsdpShards s;
  for (const Flat& f : layer) add_flat(s, f, layers, W, stored, gathered, FlatUnit::layer);
  for (const Flat& f : root) add_flat(s, f, 1, W, stored, gathered, FlatUnit::root);
  return s;
}

// FSDP2: each parameter is sharded on dim 0, padded to a multiple of the ranks
// (FSDPParam: padded_sharded_param_size = ceil(dim0 / ranks) rows).
FsdpShards param_shards(const Inventory& inv, u64 L, u64 W, Dtype stored, Dtype gathered) {
  const u64 layers = std::max<u64>(1, L);
  FsdpShards s;
  for (const auto& g : inv.groups) {
    const bool vector = g.rows <= 1;
    const u64 dim0 = vector ? g.cols : g.rows, rest = vector ? 1 : g.cols;
    const u64 shard_n = checked_mul(ceil_div(dim0, W), rest);
    const u64 padded_n = checked_mul(shard_n, W);
    s.param_bytes =
        checked_add(s.param_bytes, checked_mul(group_bytes(g, shard_n, stored), g.count));
    s.padding += checked_mul(padded_n - g.tensor_elements(), g.count);
    const bool per_layer = detail::per_layer(g, layers);
    const u64 copies = per_layer ? g.count / layers : g.count;
    (per_layer ? s.layer_bytes : s.root_bytes) +=
        checked_mul(group_bytes(g, padded_n, gathered), copies);
    if (!g.trainable || g.quant_state) continue;
    s.trainable = checked_add(s.trainable, checked_mul(shard_n, g.count));
    s.grads = s.trainable;
    if (per_layer) s.layer_trainable += checked_mul(padded_n, copies);
  }
  return s;
}

// The flat parameter `f` of one unit gains `copies` tensors of group `g`.
void add_tensors(FsdpFlatParam& f, const TensorGroup& g, u64 copies, Dtype stored) {
  if (g.tensor_elements() == 0) return;
  f.tensors.insert(f.tensors.end(), static_cast<std::size_t>(copies),
                   group_bytes(g, g.tensor_elements(), stored));
}

}  // namespace

std::vector<FsdpFlatParam> fsdp1_flat_params(const Inventory& inv, std::uint64_t layers,
                                             std::uint64_t ranks, Dtype stored, bool orig) {
  const u64 L = std::max<u64>(1, layers);
  const u64 W = std::max<u64>(1, ranks);
  // [trainable, frozen] of one layer unit, [frozen, trainable] of the root.
  std::array<FsdpFlatParam, 2> layer{}, root{};
  for (const auto& g : inv.groups) {
    const bool trains = trainable_flat(g, orig);
    if (detail::per_layer(g, L)) {
      add_tensors(layer[trains ? 0 : 1], g, g.count / L, stored);
    } else {
      add_tensors(root[trains ? 1 : 0], g, g.count, stored);
    }
  }
  std::vector<FsdpFlatParam> out;
  const auto add = [&](FsdpFlatParam f) {
    if (f.tensors.empty()) return;
    const u64 ws = width(stored);
    const u64 bytes = std::accumulate(f.tensors.begin(), f.tensors.end(), u64{0});
    f.shard_bytes = ceil_div(ceil_div(bytes, ws), W) * ws;
    out.push_back(std::move(f));
  };
  for (u64 l = 0; l < L; ++l) {
    for (const FsdpFlatParam& f : layer) add(f);
  }
  for (const FsdpFlatParam& f : root) add(f);
  return out;
}

FsdpShards fsdp_shards(const Inventory& inventory, std::uint64_t layers, unsigned version,
                       std::uint64_t ranks, Dtype stored, Dtype gathered, bool orig_params) {
  const u64 W = std::max<u64>(1, ranks);
  return version == 2 ? param_shards(inventory, layers, W, stored, gathered)
                      : flat_shards(inventory, layers, W, stored, gathered, orig_params);
}

namespace {

u64 layers_of(const RunSpec& run, const Inventory& inv) {
  return run.model.arch ? run.model.arch->num_layers
                        : canonical_architecture(parameter_count(inv)).num_layers;
}

}  // namespace

std::vector<FsdpFlatParam> fsdp1_flat_params_of(const RunSpec& run) {
  const Inventory& inv = detail::walk_inventory(run);
  const auto& p = run.parallel;
  const bool sharded = p.zero_stage > 0;
  std::vector<FsdpFlatParam> out =
      fsdp1_flat_params(inv, layers_of(run, inv), sharded ? p.shard_ranks() : 1,
                        run.precision.param, p.fsdp_orig_params);
  for (FsdpFlatParam& f : out) f.sharded = sharded;
  return out;
}

FsdpShards fsdp_shards_of(const RunSpec& run) {
  const Inventory& inv = detail::walk_inventory(run);
  const u64 layers = layers_of(run, inv);
  const auto& p = run.parallel;
  FsdpShards s = fsdp_shards(inv, layers, p.fsdp_version, p.shard_ranks(), run.precision.param,
                             p.fsdp_param_dtype.value_or(run.precision.param), p.fsdp_orig_params);
  const Inventory& given = run.model.inventory;
  if (!given.shapes_known) {
    // A bare count: the units' sizes come from its canonical shapes, the shards from the count
    // itself, evenly split (its tensors, so its padding, are unknown).
    const u64 W = std::max<u64>(1, p.shard_ranks());
    s.param_bytes = shard(parameter_bytes(given, run.precision.param), W);
    s.trainable = s.grads = shard(trainable_count(given), W);
    s.padding = 0;
  }
  return s;
}

std::string fsdp_label(const RunSpec& run) {
  const auto& p = run.parallel;
  if (p.fsdp_version == 0) return fmt::format("ZeRO-{}", p.zero_stage);
  const bool hybrid = p.shard_group > 0 && p.shard_group < p.data_parallel;
  std::string mode;
  if (p.fsdp_version == 1) {
    mode = p.zero_stage == 0   ? "NO_SHARD"
           : p.zero_stage == 2 ? "SHARD_GRAD_OP"
           : hybrid            ? "HYBRID_SHARD"
                               : "FULL_SHARD";
  } else {
    mode = p.zero_stage == 0   ? "replicate"
           : p.zero_stage == 2 ? "fully_shard, reshard_after_forward=False"
                               : "fully_shard";
  }
  if (hybrid)
    mode += fmt::format(", shard over {}, replicate {}x", p.shard_group,
                        p.data_parallel / p.shard_group);
  return fmt::format("FSDP{} {}", p.fsdp_version, mode);
}

}  // namespace memest
