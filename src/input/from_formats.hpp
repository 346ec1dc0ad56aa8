#pragma once
// memest --from: each framework's keys mapped onto the run options, one file per framework
// (docs/from.md has the tables).

#include "input/from_tree.hpp"

#include <memest/run_options.hpp>

#include <optional>

namespace memest {

/// A torchtune recipe (recipes/configs/*.yaml with `tune run`'s overrides applied).
RunOptions map_torchtune(const FromTree& tree, const RunOptions& flags);

/// A LitGPT finetune or pretrain config (config_hub/*.yaml).
RunOptions map_litgpt(const FromTree& tree, const RunOptions& flags);

/// A torchtitan train config (train_configs/*.toml).
RunOptions map_torchtitan(const FromTree& tree, const RunOptions& flags);

/// A Megatron-LM command line (its arguments as leaves "num-layers", "bf16").
RunOptions map_megatron(const FromTree& tree, const RunOptions& flags);

/// A DeepSpeed config (ds_config.json: zero_optimization, bf16, train_micro_batch_size_per_gpu).
RunOptions map_deepspeed(const FromTree& tree, const RunOptions& flags);

/// A TrainingArguments JSON (to_json_string()): the Hugging Face Trainer's keys.
RunOptions map_training_args(const FromTree& tree, const RunOptions& flags);

/// An axolotl YAML (base_model, adapter, lora_*, sequence_len, micro_batch_size, ...).
RunOptions map_axolotl(const FromTree& tree, const RunOptions& flags);

/// An accelerate config YAML (num_processes, mixed_precision, the FSDP or DeepSpeed plugin).
RunOptions map_accelerate(const FromTree& tree, const RunOptions& flags);

/// The run's `from` report with only the keys whose options kept the file's value (a flag
/// given beside --from replaces it); nullopt for a run not given by --from.
std::optional<FromReport> from_in_effect(const RunOptions& options);

/// Whether the run's own flags name a model (--model, --config, --params or --architecture): a
/// file's model then gives way.
bool flags_name_model(const RunOptions& flags);

}  // namespace memest
