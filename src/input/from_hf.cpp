// memest --from: the files of the Hugging Face stack: a DeepSpeed config (deepspeed/runtime/
// config.py's keys), a TrainingArguments JSON (its to_json_string(), transformers
// training_args.py; neither names the model: give --model) and an axolotl YAML (its
// base_model, adapter and training keys; axolotl runs the Trainer with PEFT).
#include "input/from_formats.hpp"
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

// DeepSpeed writes "auto" where the Trainer fills the value in from its own arguments.
const FromValue* ds_given(FromMapper& m, std::string_view key) {
  const FromValue* v = m.get(key);
  return v && v->text != "auto" ? v : nullptr;
}

bool ds_on(FromMapper& m, std::string_view key) {
  const FromValue* v = ds_given(m, key);
  return v && from_bool(v->text, v->where);
}

void ds_zero(FromMapper& m) {
  if (const FromValue* s = ds_given(m, "zero_optimization.stage")) m.set("--zero", s->text, *s);
  std::vector<std::string_view> offload;
  const FromValue* where = nullptr;
  for (const auto& [key, item] : {std::pair<std::string_view, std::string_view>{
                                      "zero_optimization.offload_optimizer.device", "optimizer"},
                                  {"zero_optimization.offload_param.device", "params"}}) {
    const FromValue* d = m.get(key);
    if (d && (d->text == "cpu" || d->text == "nvme")) {
      offload.push_back(item);
      where = d;
    }
  }
  if (where) m.set("--offload", fmt::format("{}", fmt::join(offload, ",")), *where);
}

void ds_precision(FromMapper& m) {
  if (ds_on(m, "bf16.enabled"))
    m.set("--precision", std::string("mixed-bf16"), *m.get("bf16.enabled"));
  if (ds_on(m, "fp16.enabled")) m.set("--precision", std::string("mixed"), *m.get("fp16.enabled"));
  if (const FromValue* t = ds_given(m, "optimizer.type")) {
    const std::string& name = t->text;
    // deepspeed/ops/adam/fused_adam.py: Adam and AdamW are FusedAdam, adam_w_mode on for AdamW.
    if (name == "Adam" || name == "AdamW" || name == "adam" || name == "adamw")
      m.set("--optimizer", std::string("adamw"), *t);
    else
      m.not_modelled(*t, "an optimizer memest does not model (AdamW's states are assumed)");
  }
}

void ds_sizes(FromMapper& m) {
  const FromValue* micro = ds_given(m, "train_micro_batch_size_per_gpu");
  if (micro) m.set("--batch", micro->text, *micro);
  if (const FromValue* g = ds_given(m, "gradient_accumulation_steps"))
    m.set("--grad-accum", g->text, *g);
  (void)m.get("train_batch_size");  // micro x accumulation x ranks: the ranks are the launcher's
}

constexpr std::array<KeyPattern, 14> kDeepspeedIgnored = {{
    {"steps_per_print", ""},
    {"wall_clock_breakdown", ""},
    {"gradient_clipping", ""},
    {"scheduler", ""},
    {"optimizer.params", ""},
    {"zero_optimization.contiguous_gradients", ""},
    {"zero_optimization.round_robin_gradients", ""},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", ""},
    {"zero_optimization.offload_optimizer.pin_memory", ""},
    {"zero_optimization.offload_param.pin_memory", ""},
    {"fp16", ""},
    {"zero_allow_untested_optimizer", ""},
    {"tensorboard", ""},
    {"comms_logger", ""},
}};

constexpr std::array<KeyPattern, 7> kDeepspeedKnown = {{
    {"zero_optimization.overlap_comm", "communication buckets overlapped with compute"},
    {"zero_optimization.reduce_bucket_size", "the gradient reduction buckets"},
    {"zero_optimization.allgather_bucket_size", "the parameter all-gather buckets"},
    {"zero_optimization.stage3_prefetch_bucket_size", "ZeRO-3's prefetched parameters"},
    {"zero_optimization.stage3_max_live_parameters", "ZeRO-3's parameters kept gathered"},
    {"zero_optimization.stage3_param_persistence_threshold", "small parameters kept whole"},
    {"activation_checkpointing", "DeepSpeed's own activation checkpointing"},
}};

// TrainingArguments' optim names (transformers training_args.py OptimizerNames) and memest's:
// {optim, optimizer, impl, paged}.
struct HfOptim {
  std::string_view optim, optimizer, impl;
  bool paged;
};
constexpr std::array<HfOptim, 11> kHfOptims = {{
    {"adamw_torch", "adamw", "foreach", false},
    {"adamw_torch_fused", "adamw", "fused", false},
    {"adamw_hf", "adamw", "single", false},
    {"adafactor", "adafactor", "", false},
    {"adamw_bnb_8bit", "adam8bit", "", false},
    {"adamw_8bit", "adam8bit", "", false},
    {"paged_adamw_8bit", "adam8bit", "", true},
    {"paged_adamw_32bit", "adamw", "", true},
    {"sgd", "sgd", "", false},
    {"adagrad", "adagrad", "", false},
    {"rmsprop", "rmsprop", "", false},
}};

void hf_optim(FromMapper& m, std::string_view key) {
  if (const FromValue* a = m.get("adafactor"); a && from_bool(a->text, a->where)) {
    m.set("--optimizer", std::string("adafactor"), *a);  // the older flag for optim adafactor
    return;
  }
  const FromValue* o = m.get(key);
  if (!o) return;
  const auto it = std::find_if(kHfOptims.begin(), kHfOptims.end(),
                               [&](const HfOptim& h) { return h.optim == o->text; });
  if (it == kHfOptims.end()) {
    m.not_modelled(*o, "an optimizer memest does not model (AdamW's states are assumed)");
    return;
  }
  m.set("--optimizer", std::string(it->optimizer), *o);
  if (!it->impl.empty()) m.set("--optimizer-impl", std::string(it->impl), *o);
  if (it->paged) m.set("--paged-optimizer", true, *o);
}

// fsdp: "full_shard auto_wrap offload" as the Trainer takes it.
void hf_fsdp(FromMapper& m) {
  const FromValue* f = m.get("fsdp");
  // to_json_string() writes the options as a list, a config file as one string.
  const std::string words =
      !f ? "" : (f->list ? fmt::format("{}", fmt::join(f->items, " ")) : f->text);
  if (!f || words.empty()) {
    m.read_under("fsdp_config");  // its defaults, with FSDP off
    return;
  }
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kModes = {{
      {"full_shard", "full"},
      {"shard_grad_op", "grad-op"},
      {"hybrid_shard", "hybrid"},
      {"no_shard", "no-shard"},
  }};
  const auto has = [&](std::string_view w) { return words.find(w) != std::string::npos; };
  const auto mode =
      std::find_if(kModes.begin(), kModes.end(), [&](const auto& k) { return has(k.first); });
  if (mode != kModes.end()) m.set("--fsdp", std::string(mode->second), *f);
  if (has("offload")) m.set("--offload", std::string("optimizer,params"), *f);
}

void hf_training(FromMapper& m) {
  if (const FromValue* b = m.get("per_device_train_batch_size")) m.set("--batch", b->text, *b);
  if (const FromValue* g = m.get("gradient_accumulation_steps")) m.set("--grad-accum", g->text, *g);
  for (const std::string_view key : {"max_seq_length", "max_length"})
    if (const FromValue* s = m.get(key)) m.set("--seq", s->text, *s);
  // bf16/fp16: torch.autocast over the model as loaded (fp32 unless loaded in another dtype).
  if (const FromValue* b = m.get("bf16"); b && from_bool(b->text, b->where))
    m.set("--precision", std::string("amp-bf16"), *b);
  if (const FromValue* h = m.get("fp16"); h && from_bool(h->text, h->where))
    m.set("--precision", std::string("amp"), *h);
  if (const FromValue* c = m.get("gradient_checkpointing"))
    m.set("--recompute", std::string(from_bool(c->text, c->where) ? "full" : "none"), *c);
  if (const FromValue* c = m.get("torch_compile"))
    m.set("--compile", from_bool(c->text, c->where), *c);
  if (const FromValue* d = m.get("deepspeed"); d && !d->text.empty())
    m.not_modelled(*d, "a DeepSpeed config: give it to --from on its own");
}

constexpr std::array<KeyPattern, 113> kHfIgnored = {{
    {"output_dir", ""},
    {"overwrite_output_dir", ""},
    {"do_train", ""},
    {"do_eval", ""},
    {"do_predict", ""},
    {"eval_strategy", ""},
    {"evaluation_strategy", ""},
    {"per_device_eval_batch_size", ""},
    {"per_gpu_train_batch_size", ""},
    {"per_gpu_eval_batch_size", ""},
    {"learning_rate", ""},
    {"weight_decay", ""},
    {"adam_beta1", ""},
    {"adam_beta2", ""},
    {"adam_epsilon", ""},
    {"max_grad_norm", ""},
    {"num_train_epochs", ""},
    {"max_steps", ""},
    {"lr_scheduler_type", ""},
    {"lr_scheduler_kwargs", ""},
    {"warmup_ratio", ""},
    {"warmup_steps", ""},
    {"log_level", ""},
    {"log_level_replica", ""},
    {"log_on_each_node", ""},
    {"logging_dir", ""},
    {"logging_strategy", ""},
    {"logging_first_step", ""},
    {"logging_steps", ""},
    {"logging_nan_inf_filter", ""},
    {"save_strategy", ""},
    {"save_steps", ""},
    {"save_total_limit", ""},
    {"save_safetensors", ""},
    {"save_on_each_node", ""},
    {"save_only_model", ""},
    {"restore_callback_states_from_checkpoint", ""},
    {"seed", ""},
    {"data_seed", ""},
    {"report_to", ""},
    {"run_name", ""},
    {"push_to_hub", ""},
    {"hub_model_id", ""},
    {"hub_strategy", ""},
    {"hub_token", ""},
    {"hub_private_repo", ""},
    {"hub_always_push", ""},
    {"push_to_hub_model_id", ""},
    {"push_to_hub_organization", ""},
    {"push_to_hub_token", ""},
    {"eval_steps", ""},
    {"eval_delay", ""},
    {"eval_on_start", ""},
    {"eval_accumulation_steps", ""},
    {"eval_do_concat_batches", ""},
    {"eval_use_gather_object", ""},
    {"prediction_loss_only", ""},
    {"dataloader_num_workers", ""},
    {"dataloader_drop_last", ""},
    {"dataloader_pin_memory", ""},
    {"dataloader_persistent_workers", ""},
    {"dataloader_prefetch_factor", ""},
    {"remove_unused_columns", ""},
    {"label_names", ""},
    {"label_smoothing_factor", ""},
    {"load_best_model_at_end", ""},
    {"metric_for_best_model", ""},
    {"greater_is_better", ""},
    {"ignore_data_skip", ""},
    {"resume_from_checkpoint", ""},
    {"disable_tqdm", ""},
    {"local_rank", ""},
    {"past_index", ""},
    {"ddp_timeout", ""},
    {"ddp_backend", ""},
    {"ddp_find_unused_parameters", ""},
    {"ddp_broadcast_buffers", ""},
    {"no_cuda", ""},
    {"use_cpu", ""},
    {"use_mps_device", ""},
    {"jit_mode_eval", ""},
    {"use_ipex", ""},
    {"bf16_full_eval", ""},
    {"fp16_full_eval", ""},
    {"tf32", ""},
    {"fp16_opt_level", ""},
    {"fp16_backend", ""},
    {"half_precision_backend", ""},
    {"tpu_num_cores", ""},
    {"tpu_metrics_debug", ""},
    {"debug", ""},
    {"skip_memory_metrics", ""},
    {"use_legacy_prediction_loop", ""},
    {"group_by_length", ""},
    {"length_column_name", ""},
    {"full_determinism", ""},
    {"torchdynamo", ""},
    {"ray_scope", ""},
    {"include_inputs_for_metrics", ""},
    {"include_for_metrics", ""},
    {"include_num_input_tokens_seen", ""},
    {"include_tokens_per_second", ""},
    {"batch_eval_metrics", ""},
    {"average_tokens_across_devices", ""},
    {"mp_parameters", ""},
    {"torch_compile_backend", ""},
    {"torch_compile_mode", ""},
    {"dispatch_batches", ""},
    {"split_batches", ""},
    {"optim_args", ""},
    {"neftune_noise_alpha", ""},
    {"fsdp_min_num_params", ""},
    {"fsdp_transformer_layer_cls_to_wrap", ""},
}};

constexpr std::array<KeyPattern, 7> kHfKnown = {{
    {"ddp_bucket_cap_mb", "DDP's gradient buckets"},
    {"use_liger_kernel", "Liger's fused kernels"},
    {"auto_find_batch_size", "a batch halved until it fits"},
    {"accelerator_config", "accelerate's options"},
    {"fsdp_config", "FSDP's options beyond the sharding (give the FSDP flags)"},
    {"gradient_checkpointing_kwargs", "how checkpointing is done"},
    {"torch_empty_cache_steps", "the cache emptied every n steps"},
}};

// lora_target_modules: transformers' module names as memest's targets.
void axolotl_lora(FromMapper& m) {
  if (const FromValue* r = m.get("lora_r")) m.set("--lora-rank", r->text, *r);
  if (const FromValue* d = m.get("lora_dropout")) m.set("--lora-dropout", d->text, *d);
  if (const FromValue* a = m.get("adapter"); a && a->text == "qlora") m.set("--qlora", true, *a);
  if (const FromValue* q = m.get("load_in_4bit"); q && from_bool(q->text, q->where))
    m.set("--qlora", true, *q);
  if (const FromValue* l = m.get("load_in_8bit"); l && from_bool(l->text, l->where))
    m.not_modelled(*l, "8-bit base weights (bitsandbytes LLM.int8)");
  if (const FromValue* all = m.get("lora_target_linear"); all && from_bool(all->text, all->where)) {
    m.set("--lora-targets", std::string("all-linear"), *all);
    return;
  }
  const FromValue* modules = m.get("lora_target_modules");
  if (!modules) return;
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kModules = {
      {{"q_proj", "q"},
       {"k_proj", "k"},
       {"v_proj", "v"},
       {"o_proj", "o"},
       {"gate_proj", "gate"},
       {"up_proj", "up"},
       {"down_proj", "down"}}};
  std::vector<std::string_view> targets;
  for (const auto& [module, target] : kModules)
    if (std::find(modules->items.begin(), modules->items.end(), module) != modules->items.end())
      targets.push_back(target);
  if (targets.size() != modules->items.size())
    m.not_modelled(*modules, "LoRA on modules other than q, k, v, o, gate, up and down_proj");
  if (!targets.empty())
    m.set("--lora-targets", fmt::format("{}", fmt::join(targets, ",")), *modules);
}

// axolotl loads the model in bf16 or fp16 when asked (torch_dtype), and the Trainer autocasts.
void axolotl_training(FromMapper& m) {
  if (const FromValue* b = m.get("base_model")) {
    if (!flags_name_model(m.flags())) m.set("--model", b->text, *b);
  }
  if (const FromValue* s = m.get("sequence_len")) m.set("--seq", s->text, *s);
  if (const FromValue* b = m.get("micro_batch_size")) m.set("--batch", b->text, *b);
  if (const FromValue* g = m.get("gradient_accumulation_steps")) m.set("--grad-accum", g->text, *g);
  const FromValue* bf16 = m.get("bf16");
  if (bf16 && (bf16->text == "auto" || from_bool(bf16->text, bf16->where)))
    m.set("--precision", std::string("bf16"), *bf16);
  if (const FromValue* h = m.get("fp16"); h && from_bool(h->text, h->where))
    m.set("--precision", std::string("fp16"), *h);
  if (const FromValue* c = m.get("gradient_checkpointing"))
    m.set("--recompute", std::string(from_bool(c->text, c->where) ? "full" : "none"), *c);
  if (const FromValue* a = m.get("attn_implementation")) {  // axolotl's newer spelling
    const std::string& k = a->text;
    if (k == "eager" || k == "sdpa")
      m.set("--attention", k, *a);
    else if (k == "flash_attention_2" || k == "flash_attention_3" || k == "flex_attention")
      m.set("--attention", std::string("flash"), *a);
    else
      m.not_modelled(*a, "an attention kernel memest does not know");
  }
  if (const FromValue* f = m.get("flash_attention"); f && from_bool(f->text, f->where))
    m.set("--attention", std::string("flash"), *f);
  if (const FromValue* f = m.get("sdp_attention"); f && from_bool(f->text, f->where))
    m.set("--attention", std::string("sdpa"), *f);
  if (const FromValue* c = m.get("torch_compile"))
    m.set("--compile", from_bool(c->text, c->where), *c);
  if (const FromValue* d = m.get("deepspeed"))
    m.not_modelled(*d, "a DeepSpeed config: give it to --from on its own");
}

constexpr std::array<KeyPattern, 41> kAxolotlIgnored = {{
    {"base_model_config", ""},
    {"model_type", ""},
    {"tokenizer_type", ""},
    {"tokenizer_config", ""},
    {"trust_remote_code", ""},
    {"strict", ""},
    {"datasets", ""},
    {"dataset_prepared_path", ""},
    {"val_set_size", ""},
    {"output_dir", ""},
    {"lora_alpha", ""},
    {"lora_fan_in_fan_out", ""},
    {"wandb_project", ""},
    {"wandb_entity", ""},
    {"wandb_watch", ""},
    {"wandb_name", ""},
    {"wandb_log_model", ""},
    {"num_epochs", ""},
    {"learning_rate", ""},
    {"lr_scheduler", ""},
    {"warmup_steps", ""},
    {"warmup_ratio", ""},
    {"evals_per_epoch", ""},
    {"saves_per_epoch", ""},
    {"logging_steps", ""},
    {"weight_decay", ""},
    {"special_tokens", ""},
    {"chat_template", ""},
    {"train_on_inputs", ""},
    {"group_by_length", ""},
    {"seed", ""},
    {"hub_model_id", ""},
    {"resume_from_checkpoint", ""},
    {"early_stopping_patience", ""},
    {"local_rank", ""},
    {"debug", ""},
    {"tf32", ""},
    {"max_grad_norm", ""},
    {"sample_packing", ""},
    {"pad_to_sequence_len", ""},
    {"lora_model_dir", ""},
}};

constexpr std::array<KeyPattern, 4> kAxolotlKnown = {{
    {"fsdp", "FSDP (give --fsdp and --dp)"},
    {"fsdp_config", "FSDP's options"},
    {"xformers_attention", "xformers' attention kernel"},
    {"lora_modules_to_save", "modules trained in full beside the adapters"},
}};

// accelerate's config YAML (accelerate config): the processes, mixed precision and the FSDP or
// DeepSpeed plugin (accelerate/commands/config/cluster.py's keys).
void accelerate_fsdp(FromMapper& m) {
  const FromValue* strategy = m.get("fsdp_config.fsdp_sharding_strategy");
  if (!strategy) return;
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kStrategies = {
      {{"FULL_SHARD", "full"},
       {"1", "full"},
       {"SHARD_GRAD_OP", "grad-op"},
       {"2", "grad-op"},
       {"NO_SHARD", "no-shard"},
       {"3", "no-shard"},
       {"HYBRID_SHARD", "hybrid"},
       {"4", "hybrid"}}};
  const auto it = std::find_if(kStrategies.begin(), kStrategies.end(),
                               [&](const auto& k) { return k.first == strategy->text; });
  if (it == kStrategies.end())
    throw Error(
        fmt::format("{}: unknown sharding strategy \"{}\" (expected FULL_SHARD, "
                    "SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD)",
                    strategy->where, strategy->text));
  m.set("--fsdp", std::string(it->second), *strategy);
  if (const FromValue* v = m.get("fsdp_config.fsdp_version")) m.set("--fsdp-version", v->text, *v);
  if (const FromValue* o = m.get("fsdp_config.fsdp_offload_params"))
    if (from_bool(o->text, o->where)) m.set("--offload", std::string("optimizer,params"), *o);
  if (const FromValue* u = m.get("fsdp_config.fsdp_use_orig_params"))
    m.set("--fsdp-orig-params", from_bool(u->text, u->where), *u);
  if (const FromValue* c = m.get("fsdp_config.fsdp_activation_checkpointing"))
    if (from_bool(c->text, c->where)) m.set("--recompute", std::string("full"), *c);
  if (const FromValue* y = m.get("fsdp_config.fsdp_sync_module_states"))
    if (from_bool(y->text, y->where)) m.set("--fsdp-sync-module-states", true, *y);
}

void accelerate_plugins(FromMapper& m) {
  if (const FromValue* n = m.get("num_processes")) m.set("--dp", n->text, *n);
  if (const FromValue* p = m.get("mixed_precision"); p && p->text != "no") {
    if (p->text != "bf16" && p->text != "fp16")
      throw Error(fmt::format("{}: unknown mixed precision \"{}\" (expected no, fp16 or bf16)",
                              p->where, p->text));
    m.set("--precision", std::string(p->text == "bf16" ? "amp-bf16" : "amp"), *p);
  }
  accelerate_fsdp(m);
  if (const FromValue* z = m.get("deepspeed_config.zero_stage")) m.set("--zero", z->text, *z);
  std::vector<std::string_view> offload;
  const FromValue* where = nullptr;
  for (const auto& [key, item] : {std::pair<std::string_view, std::string_view>{
                                      "deepspeed_config.offload_optimizer_device", "optimizer"},
                                  {"deepspeed_config.offload_param_device", "params"}}) {
    const FromValue* d = m.get(key);
    if (d && (d->text == "cpu" || d->text == "nvme")) {
      offload.push_back(item);
      where = d;
    }
  }
  if (where) m.set("--offload", fmt::format("{}", fmt::join(offload, ",")), *where);
  if (const FromValue* g = m.get("deepspeed_config.gradient_accumulation_steps"))
    m.set("--grad-accum", g->text, *g);
}

constexpr std::array<KeyPattern, 14> kAccelerateIgnored = {{
    {"compute_environment", ""},
    {"distributed_type", ""},
    {"downcast_bf16", ""},
    {"machine_rank", ""},
    {"main_training_function", ""},
    {"num_machines", ""},
    {"rdzv_backend", ""},
    {"same_network", ""},
    {"tpu_env", ""},
    {"tpu_use_cluster", ""},
    {"tpu_use_sudo", ""},
    {"use_cpu", ""},
    {"debug", ""},
    {"gpu_ids", ""},
}};

constexpr std::array<KeyPattern, 6> kAccelerateKnown = {{
    {"fsdp_config.fsdp_auto_wrap_policy", "how the model is wrapped into FSDP units"},
    {"fsdp_config.fsdp_backward_prefetch", "the next unit's parameters gathered early"},
    {"fsdp_config.fsdp_forward_prefetch", "the next unit's parameters gathered early"},
    {"fsdp_config.fsdp_cpu_ram_efficient_loading", "how the model is loaded"},
    {"fsdp_config.fsdp_reshard_after_forward", "parameters kept gathered after forward"},
    {"deepspeed_config.zero3_init_flag", "how ZeRO-3 builds the model"},
}};

}  // namespace

RunOptions map_accelerate(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::accelerate, flags);
  accelerate_plugins(m);
  m.read_under("fsdp_config.fsdp_state_dict_type");
  m.read_under("fsdp_config.fsdp_transformer_layer_cls_to_wrap");
  m.read_under("deepspeed_config.deepspeed_multinode_launcher");
  return m.finish(kAccelerateIgnored, kAccelerateKnown);
}

RunOptions map_axolotl(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::axolotl, flags);
  axolotl_training(m);
  axolotl_lora(m);
  hf_optim(m, "optimizer");
  return m.finish(kAxolotlIgnored, kAxolotlKnown);
}

RunOptions map_deepspeed(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::deepspeed, flags);
  ds_sizes(m);
  ds_zero(m);
  ds_precision(m);
  return m.finish(kDeepspeedIgnored, kDeepspeedKnown);
}

RunOptions map_training_args(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::training_args, flags);
  hf_training(m);
  hf_optim(m, "optim");
  hf_fsdp(m);
  return m.finish(kHfIgnored, kHfKnown);
}

}  // namespace memest
