#pragma once

#include <memest/estimate.hpp>

#include <optional>
#include <string>
#include <vector>

namespace memest {

/// A value as the user gave it, with where it came from ("--batch", or
/// "run.json: /training/micro_batch"), so that an error can name it.
template <typename T>
struct Setting {
  T value;
  std::string where;
};

using TextSetting = std::optional<Setting<std::string>>;
using FlagSetting = std::optional<Setting<bool>>;

/// What the user asked for, before validation: flags and run config files both fill this (see
/// run_option_table), and flags override a file. Text values are parsed by resolve(), which names
/// `where` on error.
struct RunOptions {
  // model: exactly one of params, model, config
  TextSetting params;        ///< "7B", "6738415616"
  TextSetting model;         ///< a preset name (configs/models)
  TextSetting config;        ///< path to a Hugging Face config.json
  TextSetting architecture;  ///< a config.json given inline, as JSON text
  TextSetting freeze;        ///< comma-separated roles to freeze
  TextSetting lora_rank, lora_targets, lora_dropout, qlora_init, model_code;
  FlagSetting qlora, double_quant, qlora_keeps_input, layer_clones;
  // optimizer
  TextSetting optimizer;       ///< default adamw
  TextSetting optimizer_impl;  ///< foreach (default), single, fused
  FlagSetting nesterov, amsgrad, rmsprop_momentum, centered, first_moment, fused_optimizer,
      paged_optimizer, optimizer_in_backward;
  // precision
  TextSetting precision;  ///< preset name; default fp32
  FlagSetting amp;        ///< short for precision amp
  TextSetting param_dtype, grad_dtype, state_dtype, activation_dtype, master_dtype, working_dtype,
      grad_accum_dtype;
  // training
  TextSetting batch, seq, grad_accum, attention, recompute, dropout, zero_grad, device, allocator,
      context_reserve, loss, loss_chunk, stack, transformer_impl;
  FlagSetting compile;              ///< torch.compile of each layer (docs/techniques.md)
  FlagSetting loop_keeps_output;    ///< the loop holds the model's output (docs/activations.md)
  FlagSetting softmax_keeps_input;  ///< PyTorch < 1.11's softmax backward (docs/activations.md)
  // parallelism
  TextSetting data_parallel, zero_stage, offload, tensor_parallel, pipeline_parallel,
      virtual_stages, microbatches, context_parallel, expert_parallel, vocab_multiple, fsdp,
      fsdp_version, fsdp_group, fsdp_param_dtype, fsdp_reduce_dtype;
  FlagSetting sequence_parallel, distributed_optimizer, ddp_bucket_view, fsdp_orig_params,
      fsdp_sync_module_states, fsdp_no_sync, load_full;
  // hardware
  TextSetting gpu, budget, reserve;
};

/// One run option, spelled as a flag and as a run-config key; the CLI and the config loader are
/// both generated from the same table, so every flag has a key and every key a flag.
struct RunOptionInfo {
  std::string flag;       ///< "--batch"
  std::string section;    ///< "training"
  std::string key;        ///< "micro_batch": the JSON pointer is /section/key
  std::string type_name;  ///< "N", "NAME", ... for --help
  std::string help;
  TextSetting RunOptions::*text = nullptr;     ///< set for valued options
  FlagSetting RunOptions::*boolean = nullptr;  ///< set for on/off options
  bool json_number = false;                    ///< the key also takes a JSON number
};

/// Every run option, grouped by section in display order: model, optimizer, precision,
/// training, parallel, hardware.
const std::vector<RunOptionInfo>& run_option_table();

/// Copies every setting present in `overrides` over `base`. A model given in `overrides`
/// replaces the base's model, whichever way it was given.
void merge(RunOptions& base, const RunOptions& overrides);

/// Validates and turns options into a RunSpec: parses counts and names, loads the model, applies
/// precision overrides. Throws Error naming the setting's `where`, the value and what is
/// accepted, e.g. `--optimizer: unknown optimizer "adamw8" (expected one of: ...)`.
RunSpec resolve(const RunOptions& options);

}  // namespace memest
