// What vLLM's "Model loading took" counts: GPUModelRunner.load_model (v1/worker/
// gpu_model_runner.py) wraps the loader in DeviceMemoryProfiler (utils/mem_utils.py), whose
// reading is torch.cuda.memory_allocated() (platforms/cuda.py, get_current_memory_usage); the
// default loader builds the model on the device (model_loader/base_loader.py, initialize_model
// under `with target_device`), each parameter a torch.empty of its rank's shape in the order
// the modules are made, and copies the checkpoint in from host memory. So it counts each
// parameter's allocator block (a tensor that takes an unsplit block counts its slack: PyTorch's
// caching allocator, as src/replay replays it: CachingAllocator) and the rotary tables with the
// temporaries _compute_cos_sin_cache frees (rotary_embedding/base.py, linear_scaling_rope.py). Read
// in vLLM at 494636b2. The fused layers hold one tensor: QKVParallelLinear q, k and v (a SigLIP
// tower's too, models/siglip.py), MergedColumnParallelLinear gate and up, FusedMoE each layer's
// experts.
#include "serve/serve_weights.hpp"

#include <memest/allocator_replay.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace memest {

namespace {

using u64 = std::uint64_t;

// The layers a group repeats over: "layers.*." the text layers, "layers.0..N." a tower's.
u64 family_layers(const TensorGroup& g, const Architecture& a) {
  if (g.name.find("layers.*.") != std::string::npos) return a.num_layers;
  const auto at = g.name.find("layers.0..");
  if (at == std::string::npos) return 0;
  return std::stoull(g.name.substr(at + 10)) + 1;
}

std::string family_key(const TensorGroup& g) {
  const auto at = g.name.find("layers.");
  return at == std::string::npos ? std::string() : g.name.substr(0, at);
}

// Groups held in one tensor by vLLM's fused layers: "qkv" and "gate_up" (weights and biases
// each one tensor), else the group's own name.
std::string fusion(const TensorGroup& g) {
  const std::string& k = g.kind;
  if (k == "q" || k == "k" || k == "v" || g.name.find("self_attn.q_proj.") != std::string::npos ||
      g.name.find("self_attn.k_proj.") != std::string::npos ||
      g.name.find("self_attn.v_proj.") != std::string::npos) {
    return "qkv";
  }
  if (k == "gate" || k == "up") return "gate_up";
  return g.name;
}

class Loader {
 public:
  Loader(const ServeModel& m, Dtype dtype, u64 tp)
      : m_(m), a_(*m.spec.arch), width_(width(dtype)), tp_(tp) {}
  u64 load();

 private:
  void tensor(u64 bytes) {
    if (bytes > 0) alloc_.malloc(bytes);
  }
  void rope(const RopeTable& t);
  void ropes_of_layer(u64 layer);
  void layer(const std::vector<const TensorGroup*>& groups, u64 index, u64 layers);
  u64 per_layer(const TensorGroup& g, u64 layers) const;
  const ServeModel& m_;
  const Architecture& a_;
  u64 width_, tp_;
  CachingAllocator alloc_;
};

// _compute_cos_sin_cache: inv_freq, t (t / factor when linear), freqs, cos, sin and their
// concatenation in fp32 (linear scaling concatenates its list once more), the fp32 ones freed
// as it returns; then .to(dtype) and the fp32 table freed.
void Loader::rope(const RopeTable& t) {
  const u64 half = checked_mul(checked_mul(t.positions, t.rotary_dim / 2), 4);
  const auto inv = alloc_.malloc(t.rotary_dim / 2 * 4);
  auto pos = alloc_.malloc(checked_mul(t.positions, 4));
  if (t.linear) {
    const auto scaled = alloc_.malloc(checked_mul(t.positions, 4));
    alloc_.free(pos);
    pos = scaled;
  }
  const auto freqs = alloc_.malloc(half);
  const auto cos = alloc_.malloc(half);
  const auto sin = alloc_.malloc(half);
  auto table = alloc_.malloc(2 * half);
  if (t.linear) {
    const auto joined = alloc_.malloc(2 * half);
    alloc_.free(table);
    table = joined;
  }
  for (const auto h : {freqs, cos, sin, pos, inv}) alloc_.free(h);
  alloc_.malloc(checked_mul(checked_mul(t.positions, t.rotary_dim), width_));
  alloc_.free(table);
}

// The first sliding layer makes the sliding table; the global one is made by the first layer
// (the first full one, (n / full) - 1, beside a sliding table: Gemma-3's sixth).
void Loader::ropes_of_layer(u64 layer) {
  const AttentionLayers& l = m_.attention;
  const bool dual = l.full > 0 && l.sliding > 0;
  for (const RopeTable& t : m_.rope) {
    const bool both =
        dual && !t.sliding &&
        std::any_of(m_.rope.begin(), m_.rope.end(), [](const RopeTable& r) { return r.sliding; });
    const u64 first = both ? a_.num_layers / l.full - 1 : 0;
    if (layer == first) rope(t);
  }
}

// Tensors of a group in one layer: a MoE layer's experts are one tensor.
u64 Loader::per_layer(const TensorGroup& g, u64 layers) const {
  if (g.role == Role::expert && a_.num_experts > 0) return a_.num_experts;
  return std::max<u64>(1, g.count / std::max<u64>(1, layers));
}

void Loader::layer(const std::vector<const TensorGroup*>& groups, u64 index, u64 layers) {
  std::string open;
  u64 weight = 0, bias = 0;  // elements of the open fused tensor
  const auto flush = [&] {
    tensor(checked_mul(weight, width_));
    tensor(checked_mul(bias, width_));
    weight = bias = 0;
  };
  const bool text = groups.front()->name.find("layers.*.") != std::string::npos;
  for (const TensorGroup* g : groups) {
    const u64 n = per_layer(*g, layers);
    if (index >= g->count / n) continue;  // DeepSeek's dense layers: fewer than the family's
    const std::string key = fusion(*g);
    if (key != open) flush();
    open = key;
    u64& into = g->rows == 1 ? bias : weight;
    into = checked_add(into, checked_mul(tensor_elements_per_rank(*g, a_, tp_), n));
    if (text && g->kind == "o" && g->rows > 1) {
      flush();
      open.clear();
      ropes_of_layer(index);
    }
  }
  flush();
}

u64 Loader::load() {
  const auto& gs = m_.spec.inventory.groups;
  for (std::size_t i = 0; i < gs.size();) {
    const u64 layers = family_layers(gs[i], a_);
    if (layers == 0) {
      tensor(
          checked_mul(checked_mul(tensor_elements_per_rank(gs[i], a_, tp_), gs[i].count), width_));
      ++i;
      continue;
    }
    std::vector<const TensorGroup*> family;
    const std::string key = family_key(gs[i]);
    for (; i < gs.size() && family_layers(gs[i], a_) > 0 && family_key(gs[i]) == key; ++i) {
      family.push_back(&gs[i]);
    }
    for (u64 l = 0; l < layers; ++l) layer(family, l, layers);
  }
  return alloc_.allocated();
}

}  // namespace

u64 vllm_loaded_bytes(const ServeModel& m, Dtype dtype, u64 tp) {
  return Loader(m, dtype, tp).load();
}

u64 rope_table_bytes(const ServeModel& m, Dtype dtype) {
  u64 sum = 0;
  for (const RopeTable& t : m.rope) {
    sum = checked_add(sum, checked_mul(checked_mul(t.positions, t.rotary_dim), width(dtype)));
  }
  return sum;
}

}  // namespace memest
