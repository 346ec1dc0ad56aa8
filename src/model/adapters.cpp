#include "model/adapters.hpp"

#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>
#include <utility>

namespace memest {
namespace {

constexpr std::array<std::string_view, 8> kTargets = {"q",    "k",  "v",    "o",
                                                      "gate", "up", "down", "all-linear"};

// Whether LoRA adapts this matmul weight. A fused module is adapted once when any of its parts
// is named; the lm_head never is (PEFT's all-linear leaves the output layer out).
bool targeted(const TensorGroup& g, const std::set<std::string, std::less<>>& t, bool all_linear) {
  if (!g.matmul || g.quant_state || g.kind.empty() || g.kind == "lm_head" ||
      g.kind == "fused_experts") {
    return false;
  }
  if (all_linear) return true;
  const auto has = [&](std::string_view k) { return t.contains(k); };
  if (g.kind == "qkv") return has("q") || has("k") || has("v");
  if (g.kind == "kv") return has("k") || has("v");
  if (g.kind == "gate_up") return has("gate") || has("up");
  return has(g.kind);
}

// "model.layers.*.self_attn.q_proj.weight" -> "model.layers.*.self_attn.q_proj"
std::string module_of(const std::string& weight) {
  constexpr std::string_view kSuffix = ".weight";
  return weight.ends_with(kSuffix) ? weight.substr(0, weight.size() - kSuffix.size()) : weight;
}

// The quantization constants of one nf4 weight group (Dettmers et al. 2023, sec. 3): an absmax
// per 64-element block, fp32; with double quantization 8-bit, plus fp32 per 256 blocks.
void add_quant_state(const TensorGroup& w, bool double_quant, std::vector<TensorGroup>& out) {
  const std::uint64_t blocks = ceil_div(w.tensor_elements(), kNf4BlockSize);
  TensorGroup absmax = make_group(w.name + ".absmax", w.role, 1, blocks, w.count);
  absmax.trainable = false;
  absmax.quant_state = true;
  absmax.storage = double_quant ? Dtype::int8 : Dtype::fp32;
  absmax.kind = w.kind;
  out.push_back(absmax);
  if (double_quant) {
    TensorGroup nested = absmax;
    nested.name = w.name + ".nested_absmax";
    nested.cols = ceil_div(blocks, kDoubleQuantBlockSize);
    nested.storage = Dtype::fp32;
    out.push_back(nested);
  }
}

}  // namespace

void freeze_roles(Inventory& inventory, std::span<const Role> roles) {
  for (auto& g : inventory.groups) {
    if (std::find(roles.begin(), roles.end(), g.role) != roles.end()) g.trainable = false;
  }
}

std::span<const std::string_view> lora_target_names() { return kTargets; }

namespace {

// The targets of `spec`, checked: a shaped model, a positive rank, known target names.
std::set<std::string, std::less<>> checked_targets(const ModelSpec& model, const LoraSpec& spec) {
  if (!model.arch || !model.inventory.shapes_known) {
    throw Error(
        "LoRA needs the model's shapes (expected a model preset or a config.json, not a bare "
        "parameter count)");
  }
  if (spec.rank == 0) throw Error("LoRA rank: expected a positive integer, got 0");
  if (spec.targets.empty()) {
    throw Error(
        fmt::format("LoRA targets: expected at least one of: {}", fmt::join(kTargets, ", ")));
  }
  std::set<std::string, std::less<>> targets;
  for (const auto& t : spec.targets) {
    if (std::find(kTargets.begin(), kTargets.end(), t) == kTargets.end()) {
      throw Error(fmt::format("unknown LoRA target \"{}\" (expected one of: {})", t,
                              fmt::join(kTargets, ", ")));
    }
    targets.insert(t);
  }
  return targets;
}

}  // namespace

void apply_lora(ModelSpec& model, const LoraSpec& spec) {
  const std::set<std::string, std::less<>> targets = checked_targets(model, spec);
  const bool all_linear = targets.contains("all-linear");

  Inventory& inv = model.inventory;
  std::vector<TensorGroup> added;
  std::uint64_t adapter_active = 0;
  std::set<std::string> kinds;  // for the error message
  for (auto& g : inv.groups) {
    g.trainable = false;  // the whole base model is frozen
    if (!g.matmul || g.quant_state) continue;
    if (g.kind != "lm_head" && g.kind != "fused_experts" && !g.kind.empty()) kinds.insert(g.kind);
    if (targeted(g, targets, all_linear)) {
      const std::string module = module_of(g.name);
      TensorGroup a =
          make_group(module + ".lora_A.weight", Role::adapter, spec.rank, g.cols, g.count);
      TensorGroup b =
          make_group(module + ".lora_B.weight", Role::adapter, g.rows, spec.rank, g.count);
      a.matmul = b.matmul = true;
      a.kind = b.kind = g.kind;
      a.storage = b.storage = spec.adapter_dtype;
      std::uint64_t elements = checked_add(a.elements(), b.elements());
      // A token runs only experts_per_token of the num_experts experts, and their adapters.
      if (g.role == Role::expert && model.arch->num_experts > 0) {
        elements = elements / model.arch->num_experts * model.arch->experts_per_token;
      }
      adapter_active = checked_add(adapter_active, elements);
      added.push_back(std::move(a));
      added.push_back(std::move(b));
    }
    // bitsandbytes' 4-bit loading replaces every Linear but the output layer.
    // 3-D expert parameters (gpt-oss, Granite-MoE) are not Linears and stay as they are.
    if (spec.qlora && g.kind != "lm_head" && g.kind != "fused_experts") {
      g.storage = Dtype::nf4;
      add_quant_state(g, spec.double_quant, added);
    }
  }
  if (adapter_active == 0) {
    std::vector<std::string> names(targets.begin(), targets.end());
    throw Error(
        fmt::format("LoRA targets \"{}\" match no module of this {} model (its modules: {}; "
                    "expected one of: {})",
                    fmt::join(names, ","), model.arch->model_type, fmt::join(kinds, ", "),
                    fmt::join(kTargets, ", ")));
  }
  inv.groups.insert(inv.groups.end(), added.begin(), added.end());
  model.active_params = checked_add(model.active_params, adapter_active);
}

void quantize_frozen_base(ModelSpec& model, bool double_quant) {
  std::vector<TensorGroup> added;
  for (auto& g : model.inventory.groups) {
    if (!g.matmul || g.quant_state || g.trainable || g.role == Role::adapter) continue;
    if (g.kind == "lm_head" || g.kind == "fused_experts" || g.storage == Dtype::nf4) continue;
    g.storage = Dtype::nf4;
    add_quant_state(g, double_quant, added);
  }
  model.inventory.groups.insert(model.inventory.groups.end(), added.begin(), added.end());
}

}  // namespace memest
