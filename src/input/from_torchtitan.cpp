// memest --from: a torchtitan train config (train_configs/*.toml, torchtitan @9dec370's
// torchtitan/config_manager.py names), its overrides given as section.key=value.
#include "input/from_formats.hpp"
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <array>

namespace memest {
namespace {

// torchtitan's model flavors (torchtitan/models/llama/__init__.py @9dec370) and the presets with
// the same layers: {name, flavor, preset}.
struct TitanFlavor {
  std::string_view name;
  std::string_view flavor;
  std::string_view preset;
};
constexpr std::array<TitanFlavor, 6> kTitanFlavors = {{
    {"llama3", "8B", "llama-3.1-8b"},
    {"llama3", "70B", "llama-3-70b"},
    {"llama2", "7B", "llama-2-7b"},
    {"llama2", "13B", "llama-2-13b"},
    {"llama2", "70B", "llama-2-70b"},
    {"llama3", "1B", "llama-3.2-1b"},
}};

void titan_model(FromMapper& m) {
  const FromValue* name = m.get("model.name");
  const FromValue* flavor = m.get("model.flavor");
  if (flags_name_model(m.flags()) || !name || !flavor) return;
  for (const auto& f : kTitanFlavors) {
    if (f.name == name->text && f.flavor == flavor->text) {
      m.set("--model", std::string(f.preset), *flavor);
      return;
    }
  }
  throw Error(
      fmt::format("{}: torchtitan model {} {} has no memest preset; give the model with "
                  "--model (a preset, Hub id or folder)",
                  flavor->where, name->text, flavor->text));
}

// Either section: torchtitan @9dec370 keeps pipeline and context parallelism in [experimental],
// later releases in [parallelism].
const FromValue* titan_degree(FromMapper& m, std::string_view key) {
  for (const std::string_view section : {"training", "experimental", "parallelism"})
    if (const FromValue* v = m.get(fmt::format("{}.{}", section, key))) return v;
  return nullptr;
}

// FSDP2 over data_parallel_shard_degree ranks (-1: all that remain, the run's --dp), replicated
// over data_parallel_replicate_degree.
void titan_layout(FromMapper& m) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kDegrees = {{
      {"tensor_parallel_degree", "--tp"},
      {"pipeline_parallel_degree", "--pp"},
      {"context_parallel_degree", "--cp"},
  }};
  for (const auto& [key, flag] : kDegrees)
    if (const FromValue* v = titan_degree(m, key)) m.set(flag, v->text, *v);
  const FromValue* shard = titan_degree(m, "data_parallel_shard_degree");
  const FromValue* replicate = titan_degree(m, "data_parallel_replicate_degree");
  const bool replicated = replicate && replicate->text != "1";
  if (shard && shard->text != "1") {
    m.set("--fsdp", std::string(replicated ? "hybrid" : "full"), *shard);
    m.set("--fsdp-version", std::string("2"), *shard);
    if (shard->text != "-1" && !replicated) m.set("--dp", shard->text, *shard);
    if (shard->text != "-1" && replicated) m.set("--fsdp-group", shard->text, *shard);
  } else if (replicated && replicate->text != "-1") {
    m.set("--dp", replicate->text, *replicate);
  }
  if (const FromValue* p = m.get("training.mixed_precision_param"))
    m.set("--fsdp-param-dtype", std::string(p->text == "float32" ? "fp32" : "bf16"), *p);
  if (const FromValue* r = m.get("training.mixed_precision_reduce"))
    m.set("--fsdp-reduce-dtype", std::string(r->text == "bfloat16" ? "bf16" : "fp32"), *r);
  if (const FromValue* o = m.get("training.enable_cpu_offload"))
    if (from_bool(o->text, o->where)) m.set("--offload", std::string("optimizer,params"), *o);
}

void titan_recompute(FromMapper& m) {
  const FromValue* mode = m.get("activation_checkpoint.mode");
  const FromValue* option = m.get("activation_checkpoint.selective_ac_option");
  if (!mode) return;
  if (mode->text == "none" || mode->text == "full") {
    m.set("--recompute", mode->text, *mode);
  } else if (mode->text != "selective") {
    throw Error(fmt::format("{}: unknown mode \"{}\" (expected none, selective or full)",
                            mode->where, mode->text));
  } else if (option && option->text == "op") {
    m.set("--recompute", std::string("op"), *option);
  } else if (option) {
    m.not_modelled(*option, "every n-th layer checkpointed whole");
  }
}

void titan_training(FromMapper& m) {
  if (const FromValue* b = m.get("training.batch_size")) m.set("--batch", b->text, *b);
  if (const FromValue* s = m.get("training.seq_len")) m.set("--seq", s->text, *s);
  if (const FromValue* c = m.get("training.compile"))
    m.set("--compile", from_bool(c->text, c->where), *c);
  if (const FromValue* o = m.get("optimizer.name")) {
    if (o->text != "AdamW" && o->text != "Adam")
      throw Error(
          fmt::format("{}: unknown optimizer \"{}\" (expected AdamW or Adam)", o->where, o->text));
    m.set("--optimizer", std::string(o->text == "AdamW" ? "adamw" : "adam"), *o);
  }
  if (const FromValue* f = m.get("optimizer.fused"))
    if (from_bool(f->text, f->where)) m.set("--optimizer-impl", std::string("fused"), *f);
  for (const std::string_view key :
       {"float8.enable_float8_linear", "training.enable_float8_linear"})
    if (const FromValue* f = m.get(key); f && from_bool(f->text, f->where))
      m.not_modelled(*f, "float8 linears (torchao)");
  if (const FromValue* n = m.get("model.norm_type"); n && n->text == "fused_rmsnorm")
    m.not_modelled(*n, "a fused RMSNorm kernel, which saves less than PyTorch's");
}

constexpr std::array<KeyPattern, 19> kTitanIgnored = {{
    {"job", ""},
    {"profiling", ""},
    {"metrics", ""},
    {"checkpoint", ""},
    {"comm", ""},
    {"model.tokenizer_path", ""},
    {"model.norm_type", ""},
    {"*.lr", ""},
    {"optimizer.eps", ""},
    {"training.warmup_steps", ""},
    {"training.max_norm", ""},
    {"training.steps", ""},
    {"training.dataset", ""},
    {"training.dataset_path", ""},
    {"training.seed", ""},
    {"training.deterministic", ""},
    {"experimental.pipeline_parallel_split_points", ""},
    {"experimental.pipeline_parallel_schedule", ""},
    {"training.enable_async_tensor_parallel", ""},
}};

constexpr std::array<KeyPattern, 3> kTitanKnown = {{
    {"float8", "float8 training (torchao)"},
    {"training.gradient_accumulation_steps", "gradient accumulation (give --grad-accum)"},
    {"memory_estimation", "torchtitan's own estimate; nothing of the run"},
}};

}  // namespace

RunOptions map_torchtitan(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::torchtitan, flags);
  titan_model(m);
  titan_layout(m);
  titan_recompute(m);
  titan_training(m);
  return m.finish(kTitanIgnored, kTitanKnown);
}

}  // namespace memest
