// memest --from: a torchtune recipe config (recipes/configs/*.yaml, torchtune @1814feb17 and
// 0.1 @ff594c231), with `tune run`'s key=value overrides already laid over it.
#include "input/from_formats.hpp"
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

namespace memest {
namespace {

// torchtune's model builders (torchtune/models/*/_model_builders.py @1814feb17) and the presets
// with the same architecture; lora_ and qlora_ builders are these with adapters.
constexpr std::array<std::pair<std::string_view, std::string_view>, 14> kTorchtuneBuilders = {{
    {"llama2_7b", "llama-2-7b"},
    {"llama2_13b", "llama-2-13b"},
    {"llama2_70b", "llama-2-70b"},
    {"llama3_8b", "llama-3-8b"},
    {"llama3_70b", "llama-3-70b"},
    {"llama3_1_8b", "llama-3.1-8b"},
    {"llama3_2_1b", "llama-3.2-1b"},
    {"llama3_2_3b", "llama-3.2-3b"},
    {"mistral_7b", "mistral-7b-v0.1"},
    {"gemma_7b", "gemma-7b"},
    {"phi3_mini", "phi-3-mini-4k-instruct"},
    {"qwen2_5_0_5b", "qwen2.5-0.5b"},
    {"qwen2_5_7b_base", "qwen2.5-7b"},
    {"qwen2_5_72b_instruct", "qwen2.5-72b-instruct"},
}};

// Optimizer components and what memest calls them: {component, optimizer, paged}.
struct TorchtuneOptimizer {
  std::string_view component;
  std::string_view name;
  bool paged;
};
constexpr std::array<TorchtuneOptimizer, 9> kTorchtuneOptimizers = {{
    {"torch.optim.AdamW", "adamw", false},
    {"torch.optim.Adam", "adam", false},
    {"torch.optim.SGD", "sgd", false},
    {"bitsandbytes.optim.PagedAdamW8bit", "adam8bit", true},
    {"bitsandbytes.optim.AdamW8bit", "adam8bit", false},
    {"bitsandbytes.optim.PagedAdamW", "adamw", true},
    {"torchao.prototype.low_bit_optim.AdamW8bit", "adam8bit", false},
    {"torch.optim.Adagrad", "adagrad", false},
    {"torch.optim.RMSprop", "rmsprop", false},
}};

std::string last_name(const std::string& component) {
  const auto dot = component.rfind('.');
  return dot == std::string::npos ? component : component.substr(dot + 1);
}

// model._component_: the preset, and LoRA or QLoRA from the builder's name.
void torchtune_model(FromMapper& m) {
  const FromValue* c = m.get("model._component_");
  if (!c) return;
  std::string builder = last_name(c->text);
  const bool qlora = builder.starts_with("qlora_");
  const bool lora = qlora || builder.starts_with("lora_");
  if (lora) builder = builder.substr(builder.find('_') + 1);
  if (!flags_name_model(m.flags())) {
    const auto it = std::find_if(kTorchtuneBuilders.begin(), kTorchtuneBuilders.end(),
                                 [&](const auto& b) { return b.first == builder; });
    if (it == kTorchtuneBuilders.end())
      throw Error(
          fmt::format("{}: torchtune builder \"{}\" has no memest preset; give the model "
                      "with --model (a preset, Hub id or folder)",
                      c->where, c->text));
    m.set("--model", std::string(it->second), *c);
  }
  if (qlora) m.set("--qlora", true, *c);
  if (lora && !m.get("model.lora_rank")) {
    FromValue rank = *c;
    rank.where += " (the LoRA builders' lora_rank=8)";
    m.set("--lora-rank", std::string("8"), rank);
  }
}

// lora_attn_modules, apply_lora_to_mlp and apply_lora_to_output as --lora-targets.
void torchtune_lora(FromMapper& m) {
  if (const FromValue* r = m.get("model.lora_rank")) m.set("--lora-rank", r->text, *r);
  if (const FromValue* d = m.get("model.lora_dropout")) m.set("--lora-dropout", d->text, *d);
  if (const FromValue* q = m.get("model.quantize_base"))
    if (from_bool(q->text, q->where)) m.set("--qlora", true, *q);
  const FromValue* attn = m.get("model.lora_attn_modules");
  const FromValue* mlp = m.get("model.apply_lora_to_mlp");
  if (const FromValue* out = m.get("model.apply_lora_to_output"))
    if (from_bool(out->text, out->where))
      m.not_modelled(*out,
                     "a LoRA adapter on the output projection (memest's targets are the "
                     "attention and MLP linears)");
  if (!attn) return;
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kModules = {
      {{"q_proj", "q"}, {"k_proj", "k"}, {"v_proj", "v"}, {"output_proj", "o"}}};
  std::vector<std::string_view> targets;
  for (const auto& [module, target] : kModules)
    if (std::find(attn->items.begin(), attn->items.end(), module) != attn->items.end())
      targets.push_back(target);
  for (const auto& item : attn->items) {
    const bool known = std::any_of(kModules.begin(), kModules.end(),
                                   [&](const auto& k) { return k.first == item; });
    if (!known)
      throw Error(
          fmt::format("{}: unknown module \"{}\" (expected q_proj, k_proj, v_proj, "
                      "output_proj)",
                      attn->where, item));
  }
  if (mlp && from_bool(mlp->text, mlp->where)) {
    for (const std::string_view t : {"gate", "up", "down"}) targets.push_back(t);
  }
  if (!targets.empty()) m.set("--lora-targets", fmt::format("{}", fmt::join(targets, ",")), *attn);
}

void torchtune_optimizer(FromMapper& m) {
  if (const FromValue* c = m.get("optimizer._component_")) {
    const auto it = std::find_if(kTorchtuneOptimizers.begin(), kTorchtuneOptimizers.end(),
                                 [&](const auto& o) { return o.component == c->text; });
    if (it == kTorchtuneOptimizers.end()) {
      m.not_modelled(*c, "an optimizer memest does not know (AdamW's states are assumed)");
    } else {
      m.set("--optimizer", std::string(it->name), *c);
      if (it->paged) m.set("--paged-optimizer", true, *c);
    }
  }
  if (const FromValue* f = m.get("optimizer.fused"))
    if (from_bool(f->text, f->where)) m.set("--optimizer-impl", std::string("fused"), *f);
  if (const FromValue* f = m.get("optimizer.foreach"))
    if (!from_bool(f->text, f->where)) m.set("--optimizer-impl", std::string("single"), *f);
  if (const FromValue* b = m.get("optimizer_in_bwd"))
    m.set("--optimizer-in-backward", from_bool(b->text, b->where), *b);
}

void torchtune_loss(FromMapper& m) {
  const FromValue* c = m.get("loss._component_");
  if (!c) return;
  const std::string name = last_name(c->text);
  if (name == "CrossEntropyLoss") {
    m.set("--loss", std::string("hf"), *c);
  } else if (name == "CEWithChunkedOutputLoss") {
    m.set("--loss", std::string("chunked"), *c);
    if (const FromValue* n = m.get("loss.num_output_chunks")) m.set("--loss-chunk", n->text, *n);
  } else {
    m.not_modelled(*c,
                   "a loss memest does not know (the cross-entropy of the whole logits is "
                   "assumed)");
  }
}

// The training loop's keys: sizes, precision, recompute, offload, compile.
void torchtune_training(FromMapper& m) {
  if (const FromValue* b = m.get("batch_size")) m.set("--batch", b->text, *b);
  if (const FromValue* g = m.get("gradient_accumulation_steps")) m.set("--grad-accum", g->text, *g);
  if (const FromValue* s = m.get("tokenizer.max_seq_len")) {
    m.set("--seq", s->text, *s);
  } else if (const FromValue* d = m.get("dataset.max_seq_len")) {  // torchtune 0.1's datasets
    m.set("--seq", d->text, *d);
  }
  if (const FromValue* d = m.get("dtype")) {
    if (d->text != "bf16" && d->text != "fp32")
      throw Error(
          fmt::format("{}: unknown dtype \"{}\" (expected bf16 or fp32)", d->where, d->text));
    m.set("--precision", d->text, *d);
  }
  if (const FromValue* ac = m.get("enable_activation_checkpointing"))
    m.set("--recompute", std::string(from_bool(ac->text, ac->where) ? "full" : "none"), *ac);
  if (const FromValue* off = m.get("enable_activation_offloading"))
    if (from_bool(off->text, off->where)) m.set("--offload", std::string("activations"), *off);
  if (const FromValue* cpu = m.get("fsdp_cpu_offload"))
    if (from_bool(cpu->text, cpu->where)) m.set("--offload", std::string("optimizer,params"), *cpu);
  if (const FromValue* c = m.get("compile")) m.set("--compile", from_bool(c->text, c->where), *c);
  // Packed rows attend within their own samples through flex_attention's block mask, a fused
  // kernel that keeps no scores (torchtune/modules/attention_utils.py @1814feb17).
  if (const FromValue* p = m.get("dataset.packed"); p && from_bool(p->text, p->where))
    m.set("--attention", std::string("flash"), *p);
}

// Keys that cannot change the memory of a step: paths, logging, schedules, data sources.
constexpr std::array<KeyPattern, 24> kTorchtuneIgnored = {{
    {"tokenizer._component_", ""},
    {"tokenizer.path", ""},
    {"tokenizer.prompt_template", ""},
    {"dataset", ""},
    {"seed", ""},
    {"shuffle", ""},
    {"checkpointer", ""},
    {"resume_from_checkpoint", ""},
    {"save_adapter_weights_only", ""},
    {"epochs", ""},
    {"max_steps_per_epoch", ""},
    {"output_dir", ""},
    {"metric_logger", ""},
    {"log_every_n_steps", ""},
    {"log_peak_memory_stats", ""},
    {"profiler", ""},
    {"lr_scheduler", ""},
    {"*.lr", ""},
    {"*.weight_decay", ""},
    {"*.betas", ""},
    {"model.lora_alpha", ""},
    {"device", ""},
    {"clip_grad_norm", ""},
    {"*.eps", ""},
}};

// Keys that change memory in ways memest does not model.
constexpr std::array<KeyPattern, 4> kTorchtuneKnown = {{
    {"model.use_dora", "DoRA's magnitude vectors and their activations"},
    {"custom_sharded_layers", "FSDP units of their own for these layers"},
    {"fsdp_sharding_strategy", "the FSDP sharding strategy (give --fsdp)"},
    {"enable_kv_cache", "a KV cache"},
}};

}  // namespace

RunOptions map_torchtune(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::torchtune, flags);
  torchtune_model(m);
  torchtune_lora(m);
  torchtune_optimizer(m);
  torchtune_loss(m);
  torchtune_training(m);
  return m.finish(kTorchtuneIgnored, kTorchtuneKnown);
}

}  // namespace memest
