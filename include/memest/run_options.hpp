#pragma once
// The run options: what the user asked for, before validation, and the table every front end is
// generated from (the flags and their help, the run-config keys and their JSON types, the JSON
// Schema, the Python keywords, the web form, the JSON echo). Stacks (src/input/stacks.cpp) and
// resolve() (config.hpp) both read it; it reads neither.

#include <memest/from_report.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
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
  TextSetting lora_rank, lora_targets, lora_dropout, adapter_dtype, qlora_init, model_code,
      model_loading;
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
      context_reserve, loss, loss_chunk, stack, versions, transformer_impl;
  FlagSetting compile;              ///< torch.compile of each layer (docs/techniques.md)
  FlagSetting loop_keeps_output;    ///< the loop holds the model's output (docs/activations.md)
  FlagSetting output_fp32;          ///< the loop gets the output cast to fp32 (Lightning Fabric)
  FlagSetting softmax_keeps_input;  ///< PyTorch < 1.11's softmax backward (docs/activations.md)
  FlagSetting sdpa_enable_gqa;      ///< transformers >= 4.54: k, v to SDPA unrepeated
  // parallelism
  TextSetting data_parallel, zero_stage, offload, tensor_parallel, pipeline_parallel,
      virtual_stages, microbatches, pp_schedule, pp_microbatch_group, first_stage_layers,
      last_stage_layers, context_parallel, expert_parallel, moe_dispatcher, moe_routing,
      moe_capacity_factor, vocab_multiple, fsdp, fsdp_version, fsdp_group, fsdp_param_dtype,
      fsdp_reduce_dtype;
  FlagSetting sequence_parallel, distributed_optimizer, ddp_bucket_view, fsdp_orig_params,
      fsdp_sync_module_states, fsdp_no_sync, load_full;
  // hardware
  TextSetting gpu, budget, reserve;
  /// Set by memest --from: what the framework's file said (not an option of the table).
  std::optional<FromReport> from;
};

/// The form of an option's value: what its flag takes, what JSON types its run-config key takes
/// and what the JSON Schema says of it.
enum class ValueKind {
  flag,         ///< on or off; JSON true/false
  count,        ///< a positive whole number (a micro-batch, ranks); JSON number or string
  param_count,  ///< a parameter count: 7B, 1.3e9, 6738415616; JSON number or string
  size,         ///< bytes with a unit (80GiB, 40GB) or 0; some also take a name (`choices`)
  probability,  ///< a number in [0, 1); JSON number or string
  choice,       ///< one of `choices`; a JSON number too when every choice is a whole number
  list,         ///< comma-separated `choices`, or one of `alone` by itself
  json,         ///< a JSON document (a config.json); in a run config an object
  path,         ///< a file; in a run config relative to the file
  name,         ///< a name, one of `choices` or another form the option looks up (a Hub id)
  versions,     ///< package versions, torch=2.4,transformers=4.46; in a run config an object
  number,       ///< a positive number (1.25); JSON number or string
  fraction,     ///< a number in (0, 1] (vLLM's --gpu-memory-utilization); JSON number or string
  text,  ///< text the option reads itself (llama.cpp's --tensor-split 3,1); JSON string or number
};

/// The kind's name as the Python module's options() and docs/design.md write it ("count").
std::string_view value_kind_name(ValueKind kind);

/// What an option is when the run does not give it.
struct OptionDefault {
  /// The constant the run takes ("adamw", "1", "false" for a flag); empty when none.
  std::string_view value;
  /// When not a constant: what decides it ("the precision preset", "--loss"); empty with an
  /// empty value: the option is simply off (no model frozen, no GPU).
  std::string_view from;
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
  ValueKind kind = ValueKind::flag;
  /// The names a choice, list, name or size takes: the enum's own name table.
  std::span<const std::string_view> (*choices)() = nullptr;
  /// A list's names that stand alone ("none", "all-linear").
  std::vector<std::string_view> alone;
  OptionDefault fallback;
  /// The option this one is another spelling of ("--model-loading" for --layer-clones,
  /// "--precision" for --amp): resolve() reads both, the JSON echo writes only that one.
  std::string_view alias_of;
  /// The name resolve() reads a value as, where the option takes aliases (optimizer "momentum" is
  /// "sgd-momentum"); a value it does not know is returned as it is.
  std::string (*canonical)(std::string_view) = nullptr;
};

/// Every run option, grouped by section in display order: model, optimizer, precision,
/// training, parallel, hardware.
const std::vector<RunOptionInfo>& run_option_table();

/// The row of `flag` ("--batch"); throws Error when there is none.
const RunOptionInfo& run_option(std::string_view flag);

/// Whether a run config key takes a JSON number as well as a string.
bool takes_number(const RunOptionInfo& info);

/// Whether the run gives the option: a valued one given, an on/off one given as on.
bool given(const RunOptions& o, const RunOptionInfo& info);

/// Whether the run states the option at all: a valued one given, an on/off one given on or off.
bool stated(const RunOptions& o, const RunOptionInfo& info);

/// The option's value as resolve() reads it: the given text (in its canonical name), else its
/// constant default; "true"/"false" for an on/off option; nullopt when neither.
std::optional<std::string> effective_value(const RunOptions& o, const RunOptionInfo& info);

/// Copies every setting present in `overrides` over `base`. A model given in `overrides`
/// replaces the base's model, whichever way it was given.
void merge(RunOptions& base, const RunOptions& overrides);

/// The names of the options that have no enum of their own: --fsdp's modes as PyTorch names
/// them, --zero-grad's, --offload's items, --zero's stages and --fsdp-version's versions.
std::span<const std::string_view> fsdp_mode_names();
/// --adapter-dtype's values: base (the parameters' dtype), fp32, bf16, fp16.
std::span<const std::string_view> adapter_dtype_names();
std::span<const std::string_view> zero_grad_names();
std::span<const std::string_view> offload_names();
std::span<const std::string_view> zero_stage_names();
std::span<const std::string_view> fsdp_version_names();

/// Where resolve() checks a rule: the rules of one check are evaluated together, in their order,
/// and the first one broken is the check's message (so that one run says the same thing
/// whichever front end it came through).
enum class Check {
  lora,       ///< before the LoRA rank is read
  qlora,      ///< after it
  optimizer,  ///< after the optimizer is read
  optimizer_impl,
  precision,  ///< before the precision preset is read
  loss,       ///< after the loss is read
  sizes,      ///< the micro-batch and the sequence, after the rest of the training options
  fsdp,       ///< the FSDP options without --fsdp
  fsdp_mode,  ///< after --fsdp-version is read
  fsdp1,      ///< after the shard group is read
  budget,     ///< before the GPU, budget and reserves are read
  reserve,    ///< after them
  loading,    ///< the ways of loading the model, once everything else is resolved
  moe,        ///< the MoE dispatcher's options, before the model's split is read
};

/// How a rule restricts its option.
enum class RuleKind {
  needs,      ///< the option needs one of `others` given (with `values`: with one of those values)
  conflicts,  ///< the option and `others` exclude each other (unless the other has one of `values`)
};

/// A rule between options, declared as data and checked by check_rules(); its message is a
/// template with {where} and {value} (the option as given), {other} (the other's flag),
/// {other_value} (its value as resolve() reads it) and {other_named} (the other as the run would
/// name it: its flag, or /section/key when the option came from a file).
struct OptionRule {
  Check check;
  std::string_view option;             ///< the flag restricted
  std::vector<std::string_view> when;  ///< only for these values of it; empty: any (a flag: on)
  RuleKind kind = RuleKind::needs;
  std::vector<std::string_view> others;
  std::vector<std::string_view> values;
  bool even_off = false;  ///< an on/off option given as off is checked too
  std::string_view message;
};

/// Every rule, in the order resolve() checks them.
const std::vector<OptionRule>& run_option_rules();

/// The rules that restrict `flag`.
std::vector<const OptionRule*> rules_of(std::string_view flag);

/// The message of the first rule of `check` that `o` breaks; nullopt when it breaks none.
std::optional<std::string> broken_rule(const RunOptions& o, Check check);

/// Throws Error with the message of the first rule of `check` that `o` breaks.
void check_rules(const RunOptions& o, Check check);

/// Whether the option applies to the run `o` describes: every rule that restricts it would hold
/// were it given (a run config holds only keys that apply).
bool applies(const RunOptions& o, const RunOptionInfo& info);

}  // namespace memest
