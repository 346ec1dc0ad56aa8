// memest --from: a LitGPT finetune or pretrain config (config_hub/finetune/*/*.yaml, the keys of
// litgpt/finetune/lora.py's setup() and litgpt/args.py's TrainArgs), overrides as
// train.micro_batch_size=4.
#include "input/from_formats.hpp"
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <filesystem>

namespace memest {
namespace {

// checkpoint_dir: a local folder with a config.json, else its last two names as a Hub id
// ("checkpoints/meta-llama/Llama-2-7b-hf" is meta-llama/Llama-2-7b-hf, as litgpt download
// writes it).
void litgpt_model(FromMapper& m) {
  const FromValue* dir = m.get("checkpoint_dir");
  if (flags_name_model(m.flags()) || !dir) return;
  std::error_code ec;
  if (std::filesystem::is_regular_file(std::filesystem::path(dir->text) / "config.json", ec)) {
    m.set("--model", dir->text, *dir);
    return;
  }
  std::string path = dir->text;
  while (path.ends_with('/')) path.pop_back();
  const auto last = path.rfind('/');
  const auto org =
      last == std::string::npos || last == 0 ? std::string::npos : path.rfind('/', last - 1);
  m.set("--model", org == std::string::npos ? path.substr(last + 1) : path.substr(org + 1), *dir);
}

void litgpt_precision(FromMapper& m) {
  if (const FromValue* p = m.get("precision")) {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kPrecisions = {{
        {"bf16-true", "bf16"},
        {"bf16-mixed", "amp-bf16"},
        {"16-true", "fp16"},
        {"16-mixed", "amp"},
        {"32-true", "fp32"},
        {"32", "fp32"},
    }};
    const auto it = std::find_if(kPrecisions.begin(), kPrecisions.end(),
                                 [&](const auto& k) { return k.first == p->text; });
    if (it == kPrecisions.end())
      throw Error(
          fmt::format("{}: unknown precision \"{}\" (expected bf16-true, bf16-mixed, "
                      "16-true, 16-mixed or 32-true)",
                      p->where, p->text));
    m.set("--precision", std::string(it->second), *p);
  }
  if (const FromValue* q = m.get("quantize")) {
    if (q->text == "bnb.nf4" || q->text == "bnb.nf4-dq") {
      m.set("--qlora", true, *q);
      if (q->text == "bnb.nf4-dq") m.set("--double-quant", true, *q);
      // litgpt/finetune/lora.py: a bnb quantize plugin comes with bitsandbytes' PagedAdamW.
      m.set("--paged-optimizer", true, *q);
    } else {
      m.not_modelled(*q, "a quantisation memest does not model (it models bnb.nf4 and nf4-dq)");
    }
  }
}

void litgpt_lora(FromMapper& m) {
  if (const FromValue* r = m.get("lora_r")) m.set("--lora-rank", r->text, *r);
  if (const FromValue* d = m.get("lora_dropout")) m.set("--lora-dropout", d->text, *d);
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kTargets = {
      {{"lora_query", "q"}, {"lora_key", "k"}, {"lora_value", "v"}, {"lora_projection", "o"}}};
  std::vector<std::string_view> targets;
  const FromValue* any = nullptr;
  for (const auto& [key, target] : kTargets) {
    if (const FromValue* v = m.get(key)) {
      any = v;
      if (from_bool(v->text, v->where)) targets.push_back(target);
    }
  }
  if (const FromValue* mlp = m.get("lora_mlp")) {
    any = mlp;
    if (from_bool(mlp->text, mlp->where))
      for (const std::string_view t : {"gate", "up", "down"}) targets.push_back(t);
  }
  if (const FromValue* head = m.get("lora_head"); head && from_bool(head->text, head->where))
    m.not_modelled(*head, "a LoRA adapter on the output head");
  if (any && !targets.empty())
    m.set("--lora-targets", fmt::format("{}", fmt::join(targets, ",")), *any);
}

std::uint64_t litgpt_count(const FromValue& v) {
  std::uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), n);
  if (ec != std::errc() || ptr != v.text.data() + v.text.size() || n == 0)
    throw Error(fmt::format("{}: expected a positive whole number, got \"{}\"", v.where, v.text));
  return n;
}

// devices > 1: litgpt's FSDPStrategy (auto_wrap_policy and activation_checkpointing_policy
// {Block}); global_batch_size / devices / micro_batch_size micro-batches per step.
void litgpt_training(FromMapper& m) {
  const FromValue* devices = m.get("devices");
  const std::uint64_t n = devices ? litgpt_count(*devices) : 1;
  if (n > 1) {
    m.set("--dp", devices->text, *devices);
    m.set("--fsdp", std::string("full"), *devices);
    m.set("--recompute", std::string("full"), *devices);
  }
  const FromValue* micro = m.get("train.micro_batch_size");
  if (micro) m.set("--batch", micro->text, *micro);
  if (const FromValue* s = m.get("train.max_seq_length")) m.set("--seq", s->text, *s);
  const FromValue* global = m.get("train.global_batch_size");
  if (global && micro) {
    const std::uint64_t mb = litgpt_count(*micro);
    const std::uint64_t per_device = litgpt_count(*global) / n;
    if (per_device % mb != 0 || per_device == 0)
      throw Error(fmt::format("{}: {} over {} devices is not a multiple of micro_batch_size {}",
                              global->where, global->text, n, mb));
    m.set("--grad-accum", std::to_string(per_device / mb), *global);
  }
  if (const FromValue* o = m.get("optimizer")) {
    if (o->text != "AdamW" && o->text != "torch.optim.AdamW") m.not_modelled(*o, "an optimizer");
  }
  if (const FromValue* c = m.get("optimizer.class_path"); c && c->text != "torch.optim.AdamW")
    m.not_modelled(*c, "an optimizer other than AdamW");
}

constexpr std::array<KeyPattern, 16> kLitgptIgnored = {{
    {"out_dir", ""},
    {"data", ""},
    {"eval", ""},
    {"logger_name", ""},
    {"seed", ""},
    {"access_token", ""},
    {"lora_alpha", ""},
    {"num_nodes", ""},
    {"train.save_interval", ""},
    {"train.log_interval", ""},
    {"train.lr_warmup_steps", ""},
    {"train.lr_warmup_fraction", ""},
    {"train.epochs", ""},
    {"train.max_tokens", ""},
    {"train.max_steps", ""},
    {"train.min_lr", ""},
}};

constexpr std::array<KeyPattern, 3> kLitgptKnown = {{
    {"train.tie_embeddings", "the embedding tied to the output head"},
    {"optimizer.init_args", ""},
    {"resume", "a resumed run"},
}};

}  // namespace

RunOptions map_litgpt(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::litgpt, flags);
  litgpt_model(m);
  litgpt_precision(m);
  litgpt_lora(m);
  litgpt_training(m);
  m.read_under("optimizer.init_args");  // lr, weight_decay, betas
  return m.finish(kLitgptIgnored, kLitgptKnown);
}

}  // namespace memest
