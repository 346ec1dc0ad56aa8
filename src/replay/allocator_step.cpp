// The allocations and frees of a run, derived from the walk's moments, replayed through
// PyTorch's caching allocator: model loading, a first step (optimizer states created lazily
// in its optimizer phase) and a steady step (docs/activations.md, "Allocator and context").
//
// Each moment of the walk is the set of tensors live at one instant. Between two consecutive
// instants, the copies (instances) of a tensor that the second holds and the first does not
// are allocated and those it no longer holds are freed; frees come first, so the live bytes
// never exceed the larger of the two moments. A tensor entered with count n has instances
// 0..n-1 (a layer tensor's instance k is layer k's copy); frees run from the highest instance
// down and allocations from the lowest up, layer by layer, as the forward pass allocates and
// the backward pass frees. Alternatives (moments with one name) are instants inside one op,
// replayed one after the other.
#include "replay/allocator_step.hpp"

#include "model/model_state.hpp"
#include "model/walked_layers.hpp"
#include "replay/fsdp_init.hpp"
#include "replay/nf4_init.hpp"
#include "step/step_build.hpp"

#include <memest/allocator_replay.hpp>
#include <memest/dtype.hpp>
#include <memest/parallel.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <utility>

namespace memest::detail {
namespace {

using Handle = CachingAllocator::Handle;

// The walk's moments in the order they happen (MomentKind's order, include/memest/step.hpp):
// the walk lists forward_end before the last layer's attention, and backward_end before the
// layers. Alternatives keep their order.
std::vector<std::size_t> in_time_order(const std::vector<MomentSpec>& walk) {
  std::vector<std::size_t> order(walk.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return time_rank(walk[a].id) < time_rank(walk[b].id);
  });
  return order;
}

// Parts whose whole-model tensors are sums over the parameter tensors: PyTorch allocates one
// block per parameter tensor (and per optimizer state of it).
bool per_parameter(Part part) {
  switch (part) {
    case Part::params:
    case Part::grads:
    case Part::grad_accum:
    case Part::master_params:
    case Part::master_grads:
    case Part::optimizer_state:
      return true;
    default:
      return false;
  }
}

// One parameter tensor's blocks in a per-parameter part (PyTorch allocates them one by one).
void tensor_blocks(const RunSpec& run, const Step& step, Part part, const TensorGroup& g,
                   u64 trainable, std::vector<u64>& out) {
  const auto& p = run.precision;
  const u64 n = g.tensor_elements();
  const bool train = g.trainable && !g.quant_state;
  switch (part) {
    case Part::params:
      out.push_back(bytes_for(g.storage.value_or(p.param), n));
      return;
    case Part::grads:
      if (train) out.push_back(width(p.grad) * n);
      return;
    case Part::grad_accum:
      if (train && p.grad_accum) out.push_back(width(*p.grad_accum) * n);
      return;
    case Part::master_params:
    case Part::master_grads:
      if (train && p.master) out.push_back(width(*p.master) * n);
      return;
    case Part::optimizer_state: {
      if (!train || trainable == 0 || step.state_bytes % trainable != 0) return;
      // Per element `per` bytes of state: fp32 states (Adam's exp_avg and exp_avg_sq) are
      // tensors of their own; other widths stay one block per parameter.
      const u64 per = step.state_bytes / trainable;
      const u64 each = per % 4 == 0 ? 4 : per;
      for (u64 k = 0; k < per / each; ++k) out.push_back(each * n);
      if (step.step_counter_bytes) out.push_back(4);
      return;
    }
    default:
      return;
  }
}

// A group with one share per layer: a "layers.*" name and a count that is a multiple of L.
bool per_layer(const TensorGroup& g, u64 L) {
  return L > 1 && g.name.find('*') != std::string::npos && g.count % L == 0;
}

// The blocks of a whole per-parameter part and of one layer's share of it.
struct PartBlocks {
  std::vector<u64> all, layer;
  u64 all_bytes = 0, layer_bytes = 0;
};

PartBlocks part_blocks(const RunSpec& run, const Step& step, Part part, u64 L) {
  PartBlocks out;
  const Inventory& inv = walk_inventory(run);
  const u64 trainable = trainable_count(inv);
  for (const TensorGroup& g : inv.groups) {
    std::vector<u64> one;
    tensor_blocks(run, step, part, g, trainable, one);
    for (u64 c = 0; c < g.count; ++c) out.all.insert(out.all.end(), one.begin(), one.end());
    for (u64 c = 0; per_layer(g, L) && c < g.count / L; ++c)
      out.layer.insert(out.layer.end(), one.begin(), one.end());
  }
  out.all_bytes = std::accumulate(out.all.begin(), out.all.end(), u64{0});
  out.layer_bytes = std::accumulate(out.layer.begin(), out.layer.end(), u64{0});
  return out;
}

// What cudaMalloc can hand out on the run's device: the budget's usable bytes less the context
// the run states (needed = reserved + context, src/step/plan.cpp); unbounded without a budget.
AllocatorLimits limits_of(const RunSpec& run) {
  AllocatorLimits limits;
  if (!run.budget) return limits;
  const u64 usable = run.budget->usable();
  const u64 context = run.training.context_reserve;
  limits.device_capacity = usable > context ? usable - context : 0;
  return limits;
}

class Replay {
 public:
  Replay(const RunSpec& run, const Step& step, u64 L, const Basis& x)
      : run_(run),
        step_(step),
        L_(L),
        x_(x),
        a_(limits_of(run)),
        live_(step.tensors.size()),
        blocks_(step.tensors.size()),
        known_(step.tensors.size(), false),
        want_(step.tensors.size(), 0) {}

  AllocatorReplay run();

 private:
  void setup();
  void build_on_device();
  std::vector<Handle> materialise_whole();
  void construct_fsdp_units(const MomentSpec& loaded);
  void adopt_shards(const MomentSpec& loaded, std::vector<Handle> shards, std::vector<u64> sizes);
  void replay_events(const std::vector<AllocEvent>& events, std::vector<Handle>& slot);
  Handle quantise(const TensorGroup& g, Handle weight);
  Handle build(const TensorGroup& g, bool quantise);
  Handle clone(const TensorGroup& g, Handle from);
  void stretch(const std::vector<MomentSpec>& walk, StepOf step, std::string_view name);
  template <typename Keep>
  void moment(const MomentSpec& m, Keep&& keep);
  void transition();
  const std::vector<u64>& blocks_of(std::uint32_t t, const Entry& e);
  std::vector<u64> per_parameter_blocks(const Tensor& t, u64 bytes);
  void alloc(std::uint32_t t);
  void free(std::uint32_t t);
  void note();

  const RunSpec& run_;
  const Step& step_;
  u64 L_;
  const Basis& x_;
  CachingAllocator a_;
  std::vector<std::vector<std::vector<Handle>>> live_;  // per tensor: instances, their blocks
  std::vector<std::vector<u64>> blocks_;                // per tensor: one instance's blocks
  std::vector<bool> known_;
  std::vector<u64> want_;
  std::vector<std::uint32_t> touched_;
  std::array<std::optional<PartBlocks>, kPartCount> parts_;
  RunInstant now_;
  AllocatorReplay out_;
};

std::vector<u64> Replay::per_parameter_blocks(const Tensor& t, u64 bytes) {
  auto& pb = parts_[static_cast<std::size_t>(t.part)];
  if (!pb) pb = part_blocks(run_, step_, t.part, L_);
  if (bytes == pb->all_bytes) return pb->all;
  if (bytes == pb->layer_bytes) return pb->layer;
  // The whole part plus what the inventory does not hold (the optimizer's step counters kept
  // in device memory by an implementation without per-tensor counters).
  if (bytes > pb->all_bytes && !pb->all.empty()) {
    std::vector<u64> out = pb->all;
    out.push_back(bytes - pb->all_bytes);
    return out;
  }
  return {bytes};
}

// One instance's blocks: a rank's share of a sharded state is one flat buffer; a whole-model
// or one-layer state is one block per parameter tensor; any other tensor is one block.
const std::vector<u64>& Replay::blocks_of(std::uint32_t t, const Entry& e) {
  if (known_[t]) return blocks_[t];
  known_[t] = true;
  const Tensor& ts = step_.tensors[t];
  const u64 bytes = ts.exists_at(x_) ? ts.bytes.at(x_) : 0;
  std::vector<u64>& b = blocks_[t];
  if (bytes == 0) return b;
  if (e.ranks > 1) {
    b = {shard(checked_mul(bytes, e.count), e.ranks)};
  } else if (ts.scope == Scope::state && per_parameter(ts.part)) {
    b = per_parameter_blocks(ts, bytes);
  } else {
    b = {bytes};
  }
  b.erase(std::remove(b.begin(), b.end(), u64{0}), b.end());
  return b;
}

void Replay::note() {
  if (a_.allocated() > out_.allocated) {
    out_.allocated = a_.allocated();
    out_.allocated_at = now_;
  }
  if (a_.max_reserved() > out_.reserved) {
    out_.reserved = a_.max_reserved();
    out_.reserved_at = now_;
  }
}

void Replay::alloc(std::uint32_t t) {
  std::vector<Handle> hs;
  const auto stream = static_cast<std::uint8_t>(step_.tensors[t].stream);
  for (const u64 bytes : blocks_[t]) {
    hs.push_back(a_.malloc(bytes, stream));
    note();
  }
  live_[t].push_back(std::move(hs));
}

void Replay::free(std::uint32_t t) {
  for (auto it = live_[t].back().rbegin(); it != live_[t].back().rend(); ++it) a_.free(*it);
  live_[t].pop_back();
}

// The instances `want_` asks for. Frees come first (the previous moment's temporaries, then
// the highest instance first), so the live bytes never exceed the larger moment; then the
// allocations (lowest instance first, in tensor order). Allocations over several layers
// (instances k of one tensor) are replayed layer by layer: the layer's allocations, then the
// target moment's own temporaries (transient tensors) allocated and freed again, as each
// layer's ops do; the last layer keeps them.
void Replay::transition() {
  std::vector<std::pair<u64, std::uint32_t>> frees, allocs, temps;
  const auto temporary = [&](std::uint32_t t, u64 count) {
    return step_.tensors[t].scope == Scope::transient && count == 1;
  };
  for (const std::uint32_t t : touched_) {
    const u64 have = live_[t].size();
    if (want_[t] < have && temporary(t, have)) free(t);  // the last moment's temporaries
    for (u64 k = want_[t]; k < live_[t].size(); ++k) frees.emplace_back(k, t);
    for (u64 k = live_[t].size(); k < want_[t]; ++k)
      (temporary(t, want_[t]) ? temps : allocs).emplace_back(k, t);
  }
  std::sort(frees.begin(), frees.end(), std::greater<>());
  std::sort(allocs.begin(), allocs.end());
  const auto groups = [](const std::vector<std::pair<u64, std::uint32_t>>& v) {
    std::vector<std::pair<std::size_t, std::size_t>> out;  // [begin, end) of one k
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i == 0 || v[i].first != v[i - 1].first) out.emplace_back(i, i);
      out.back().second = i + 1;
    }
    return out;
  };
  for (const auto& f : frees) free(f.second);
  const auto ga = groups(allocs);
  const std::size_t n = std::max<std::size_t>(ga.size(), 1);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = i < ga.size() ? ga[i].first : 0; i < ga.size() && j < ga[i].second; ++j)
      alloc(allocs[j].second);
    for (const auto& tp : temps) alloc(tp.second);
    if (i + 1 == n) break;
    for (auto it = temps.rbegin(); it != temps.rend(); ++it) free(it->second);
  }
  std::erase_if(touched_, [&](std::uint32_t t) { return live_[t].empty(); });
}

// Makes the live set that of moment `m`, less the entries `keep` rejects.
template <typename Keep>
void Replay::moment(const MomentSpec& m, Keep&& keep) {
  for (const std::uint32_t t : touched_) want_[t] = 0;
  for (std::uint32_t i = m.begin; i < m.end; ++i) {
    const Entry& e = step_.entries[i];
    if (!keep(e) || blocks_of(e.tensor, e).empty()) continue;
    if (want_[e.tensor] == 0 && live_[e.tensor].empty()) touched_.push_back(e.tensor);
    want_[e.tensor] += e.ranks > 1 ? 1 : e.count;
  }
  transition();
}

// The model's tensors in the order a constructor creates them: a run of per-layer groups
// (per_layer) layer by layer, each group's share of a layer in inventory order; every other
// group where it stands. Each entry is one tensor.
std::vector<const TensorGroup*> construction_order(const Inventory& inv, u64 L) {
  std::vector<const TensorGroup*> out;
  for (std::size_t i = 0; i < inv.groups.size();) {
    std::size_t end = i;
    while (end < inv.groups.size() && per_layer(inv.groups[end], L)) ++end;
    for (u64 layer = 0; layer < L && end > i; ++layer) {
      for (std::size_t k = i; k < end; ++k)
        out.insert(out.end(), static_cast<std::size_t>(inv.groups[k].count / L), &inv.groups[k]);
    }
    if (end > i) {
      i = end;
      continue;
    }
    out.insert(out.end(), static_cast<std::size_t>(inv.groups[i].count), &inv.groups[i]);
    ++i;
  }
  return out;
}

// A sequence of allocations and frees into `slot`.
void Replay::replay_events(const std::vector<AllocEvent>& events, std::vector<Handle>& slot) {
  for (const AllocEvent& ev : events) {
    if (ev.bytes == 0) {
      a_.free(std::exchange(slot[ev.slot], CachingAllocator::kNone));
      continue;
    }
    slot[ev.slot] = a_.malloc(ev.bytes);
    note();
  }
}

// A bf16 weight of group `g` on the device quantised to NF4 (src/nf4_init.cpp) and freed; the
// NF4 data is returned.
Handle Replay::quantise(const TensorGroup& g, Handle weight) {
  std::vector<Handle> slot(kNf4Slots, CachingAllocator::kNone);
  replay_events(nf4_quantisation(g.tensor_elements(), nf4_init(run_.training.model_loading)), slot);
  a_.free(weight);
  return slot[kNf4Data];
}

// One tensor of group `g` built on the device: a QLoRA base weight created in 16 bits and
// quantised when `quantise_it`, else allocated as it is stored.
Handle Replay::build(const TensorGroup& g, bool quantise_it) {
  if (!quantise_it || g.storage != Dtype::nf4) {
    std::vector<u64> blocks;
    tensor_blocks(run_, step_, Part::params, g, 0, blocks);
    const Handle h = blocks.empty() ? CachingAllocator::kNone : a_.malloc(blocks.front());
    note();
    return h;
  }
  const Handle weight = a_.malloc(width(run_.precision.param) * g.tensor_elements());
  note();
  return quantise(g, weight);
}

// A deep copy of tensor `from` of group `g`: torchtune's clone of an NF4Tensor dequantises it
// and quantises the result again (_register_nf4_dispatch_ops.py, 0914d5cfb to 1814feb17); any
// other tensor is copied as stored.
Handle Replay::clone(const TensorGroup& g, Handle from) {
  if (g.storage != Dtype::nf4 || from == CachingAllocator::kNone) return build(g, false);
  std::vector<Handle> slot(kNf4Slots, CachingAllocator::kNone);
  replay_events(nf4_dequantisation(g.tensor_elements()), slot);
  return quantise(g, slot[kNf4Original]);
}

// The model built on the device (--model-loading layer-clones, nf4-whole, nf4-chunked or a
// pair), as torchtune's builders do: with layer clones (lora_llama2 in
// torchtune/models/llama2/_component_builders.py, 0914d5cfb and 1814feb17) one decoder layer is
// built, the rest of the model where it stands, and TransformerDecoder deep-copies that layer
// num_layers times (_get_clones); the first layer goes when the builder returns. Without it every
// tensor is built where it stands (llama3_2's builders loop over the layers). QLoRA base weights
// are quantised as their LoRALinear is created or copied; then load_state_dict copies each in from
// the host: it is moved to the device and quantised there (torchtune's inplace_copy for torchao <
// 0.2, 0914d5cfb; torchao's NF4Tensor.copy_ from 0ed30902e), and the new NF4 data replaces the old.
// What was built stays until the loading below allocates the same tensors again: its segments stay
// cached.
void Replay::build_on_device() {
  const bool quant = nf4_init(run_.training.model_loading) != QloraInit::none;
  const bool clones = clones_layers(run_.training.model_loading);
  now_ = {"set-up", quant ? "model built, base weights quantised to NF4" : "model built"};
  const Inventory& inv = walk_inventory(run_);
  std::map<const TensorGroup*, std::vector<Handle>> first_layer;
  for (const TensorGroup& g : inv.groups) {
    for (u64 c = 0; clones && per_layer(g, L_) && c < g.count / L_; ++c)
      first_layer[&g].push_back(build(g, quant));
  }
  const std::vector<const TensorGroup*> order = construction_order(inv, L_);
  std::vector<Handle> built;
  std::map<const TensorGroup*, u64> copies;
  for (const TensorGroup* g : order) {
    if (!clones || !per_layer(*g, L_)) {
      built.push_back(build(*g, quant));
      continue;
    }
    const std::vector<Handle>& from = first_layer[g];
    built.push_back(clone(*g, from[copies[g]++ % from.size()]));
  }
  for (auto it = first_layer.rbegin(); it != first_layer.rend(); ++it) {
    for (auto h = it->second.rbegin(); h != it->second.rend(); ++h) a_.free(*h);
  }
  now_ = {"set-up", "checkpoint loaded: base weights quantised again"};
  for (std::size_t i = 0; quant && i < order.size(); ++i) {
    if (order[i]->storage != Dtype::nf4) continue;
    const Handle old = std::exchange(built[i], build(*order[i], true));
    a_.free(old);
  }
  for (auto it = built.rbegin(); it != built.rend(); ++it) a_.free(*it);
}

// FSDP1's constructor from the host (--model-loading fsdp-sync, src/replay/fsdp_init.cpp): flat
// parameter after flat parameter, what it allocates and frees; the shards it keeps are the
// parameters of the loaded model. With CPUOffload(offload_params=True) each shard goes to the
// host as soon as it is cut (_init_param_handle_from_params: flat_param_to(cpu)).
void Replay::construct_fsdp_units(const MomentSpec& loaded) {
  now_ = {"set-up", "FSDP units moved to the device, broadcast, flattened and sharded"};
  std::vector<Handle> shards;
  std::vector<u64> sizes;
  for (const FsdpFlatParam& f : fsdp1_flat_params_of(run_)) {
    std::vector<Handle> slot(fsdp1_unit_slots(f), CachingAllocator::kNone);
    replay_events(fsdp1_unit_construction(f), slot);
    if (run_.parallel.offload_params) {
      a_.free(slot[kFsdpShard]);
      continue;
    }
    shards.push_back(slot[kFsdpShard]);
    sizes.push_back(f.shard_bytes);
  }
  adopt_shards(loaded, std::move(shards), std::move(sizes));
}

// The loaded moment's parameters take the constructor's shards as their blocks, one per flat
// parameter, when they hold the same bytes; otherwise the shards are freed and the parameters
// allocated as the walk has them.
void Replay::adopt_shards(const MomentSpec& loaded, std::vector<Handle> shards,
                          std::vector<u64> sizes) {
  const u64 total = std::accumulate(sizes.begin(), sizes.end(), u64{0});
  for (std::uint32_t i = loaded.begin; i < loaded.end; ++i) {
    const Entry& e = step_.entries[i];
    const Tensor& t = step_.tensors[e.tensor];
    if (t.scope != Scope::state || t.part != Part::params) continue;
    const std::vector<u64>& b = blocks_of(e.tensor, e);
    const bool one = e.ranks > 1 || e.count == 1;
    if (!one || std::accumulate(b.begin(), b.end(), u64{0}) != total || !live_[e.tensor].empty())
      break;
    blocks_[e.tensor] = std::move(sizes);
    live_[e.tensor].push_back(std::move(shards));
    touched_.push_back(e.tensor);
    return;
  }
  for (auto it = shards.rbegin(); it != shards.rend(); ++it) a_.free(*it);
}

// --model-loading full: every parameter whole, one block per tensor, before the shards are
// taken; freed once the model is loaded.
std::vector<Handle> Replay::materialise_whole() {
  now_ = {"set-up", "whole model materialised"};
  auto& params = parts_[static_cast<std::size_t>(Part::params)];
  if (!params) params = part_blocks(run_, step_, Part::params, L_);
  std::vector<Handle> whole;
  for (const u64 bytes : params->all) {
    whole.push_back(a_.malloc(bytes));
    note();
  }
  return whole;
}

// Model loading: how the model reaches the device (--model-loading), then the parameters (one
// block per tensor, in parameters() order), the master weights of an implementation that keeps
// them, the buffers.
void Replay::setup() {
  const auto& walk = step_.first.empty() ? step_.steady : step_.first;
  if (walk.empty()) return;
  const MomentSpec& m = walk[in_time_order(walk).front()];
  std::vector<Handle> whole;
  switch (run_.training.model_loading) {
    case ModelLoading::none:
      break;
    case ModelLoading::layer_clones:
    case ModelLoading::nf4_whole:
    case ModelLoading::nf4_chunked:
    case ModelLoading::layer_clones_nf4_whole:
    case ModelLoading::layer_clones_nf4_chunked:
      build_on_device();
      break;
    case ModelLoading::fsdp_sync:
      construct_fsdp_units(m);
      break;
    case ModelLoading::full:
      whole = materialise_whole();
      break;
  }
  now_ = {"set-up", "model loaded"};
  moment(m, [&](const Entry& e) {
    const Tensor& t = step_.tensors[e.tensor];
    return t.scope == Scope::state && (t.part == Part::params || t.part == Part::master_params);
  });
  for (auto it = whole.rbegin(); it != whole.rend(); ++it) a_.free(*it);
  out_.setup_reserved = a_.reserved();
}

// One step in time order; the first step has no optimizer states before its optimizer phase
// (torch.optim creates them lazily), unless it has a walk of its own (Step::first).
void Replay::stretch(const std::vector<MomentSpec>& walk, StepOf step, std::string_view name) {
  for (const std::size_t k : in_time_order(walk)) {
    const MomentSpec& m = walk[k];
    now_ = {name, moment_name(m.id)};
    const Phase phase = phase_of(m.id.kind);
    const bool before_optimizer =
        phase != Phase::optimizer && phase != Phase::master_copy && phase != Phase::zero_grad;
    const bool drop_states = step == StepOf::first && step_.first.empty() && before_optimizer;
    moment(m, [&](const Entry& e) { return !(drop_states && e.tensor == step_.states_tensor); });
  }
}

AllocatorReplay Replay::run() {
  setup();
  // PyTorch's cuBLAS workspaces, allocated through the caching allocator by the first matmul
  // of each cuBLAS handle and stream and kept (aten/src/ATen/cuda/CublasHandlePool.cpp,
  // setWorkspaceForHandle: one per (handle, stream); handles are per thread). A training step
  // has two threads that run matmuls: the forward's, and autograd's device thread, which runs
  // the backward (measured: 2 x 32 MiB on an H200, tests/data/truth_cuda).
  out_.cublas_workspace = kCublasThreads * run_.training.cublas_workspace;
  now_ = {"first step", "cuBLAS workspace (the forward's thread)"};
  (void)a_.malloc(run_.training.cublas_workspace);
  note();
  now_ = {"first step", "cuBLAS workspace (autograd's device thread)"};
  (void)a_.malloc(run_.training.cublas_workspace);
  note();
  // Transformer Engine's workspace, a torch.empty at its first GEMM (kTeWorkspace).
  out_.te_workspace = run_.training.te_workspace;
  now_ = {"first step", "Transformer Engine workspace"};
  (void)a_.malloc(out_.te_workspace);
  note();
  stretch(step_.first.empty() ? step_.steady : step_.first, StepOf::first, "first step");
  stretch(step_.steady, StepOf::steady, "steady state");
  out_.segments = a_.segments();
  out_.released_segments = a_.released_segments();
  out_.out_of_memory = a_.out_of_memory();
  return out_;
}

}  // namespace

AllocatorReplay replay_allocator(const RunSpec& run, const Step& step, std::uint64_t L,
                                 const Basis& x) {
  check_walked_layers(L, "--allocator cuda");
  return Replay(run, step, L, x).run();
}

}  // namespace memest::detail
