// memest --from FILE [KEY=VALUE ...]: which framework's file it is, its overrides as that
// framework's launcher takes them, and its keys mapped onto the run options (from_formats.hpp).
#include "input/from_formats.hpp"
#include "input/from_tree.hpp"
#include "input/json_access.hpp"

#include <memest/error.hpp>
#include <memest/from.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace memest {
namespace {

bool has_extension(const std::string& source, std::initializer_list<std::string_view> exts) {
  return std::any_of(exts.begin(), exts.end(), [&](std::string_view e) {
    return source.size() > e.size() && source.ends_with(e);
  });
}

// Megatron-LM's functional tests keep the command line as MODEL_ARGS ("--num-layers: 12",
// "--bf16: true"), which their launcher turns into arguments: a flag given false is left out.
FromTree megatron_model_args(const FromTree& yaml) {
  FromTree args{yaml.source, {}};
  constexpr std::string_view kPrefix = "MODEL_ARGS.--";
  for (const auto& v : yaml.values) {
    if (!v.path.starts_with(kPrefix) || v.text == "false") continue;
    FromValue arg = v;
    arg.path = v.path.substr(kPrefix.size());
    args.values.push_back(std::move(arg));
  }
  return args;
}

bool any_component(const FromTree& tree) {
  return std::any_of(tree.values.begin(), tree.values.end(),
                     [](const FromValue& v) { return v.path.ends_with("._component_"); });
}

FromFormat yaml_format(const FromTree& tree) {
  if (tree.has_under("MODEL_ARGS")) return FromFormat::megatron;
  if (any_component(tree)) return FromFormat::torchtune;
  if (tree.has_under("base_model")) return FromFormat::axolotl;
  if (tree.has_under("compute_environment") || tree.has_under("distributed_type"))
    return FromFormat::accelerate;
  if (tree.has_under("checkpoint_dir") || tree.has_under("train") || tree.has_under("precision"))
    return FromFormat::litgpt;
  throw Error(fmt::format(
      "{}: not a config memest can read: expected a torchtune recipe (keys with _component_), a "
      "LitGPT config (checkpoint_dir, train), an axolotl config (base_model), an accelerate config "
      "(compute_environment) or Megatron-LM's model_config.yaml (MODEL_ARGS)",
      tree.source));
}

// `tune run`'s overrides (torchtune/config/_utils.py @1814feb17): ~KEY removes a key, KEY=VALUE
// on a component's key sets its _component_; the others' launchers take dotted KEY=VALUE (a
// Megatron-LM argument as its name: micro-batch-size=4).
void apply_override(FromTree& tree, FromFormat format, const std::string& o) {
  const std::string where = fmt::format("override {}", o);
  if (format == FromFormat::torchtune && o.starts_with("~")) {
    if (!tree.remove(o.substr(1)))
      throw Error(fmt::format("{}: {} has no key {}", where, tree.source, o.substr(1)));
    return;
  }
  const auto eq = o.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(fmt::format("{}: expected KEY=VALUE (a dotted key of {})", where, tree.source));
  std::string key = o.substr(0, eq);
  if (format == FromFormat::megatron) key.erase(0, key.find_first_not_of('-'));
  if (format == FromFormat::torchtune && tree.find(key + "._component_")) key += "._component_";
  tree.set(key, o.substr(eq + 1), where);
}

FromFormat json_format(const FromTree& tree) {
  for (const std::string_view key :
       {"zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size"})
    if (tree.has_under(key)) return FromFormat::deepspeed;
  if (tree.has_under("per_device_train_batch_size")) return FromFormat::training_args;
  throw Error(fmt::format(
      "{}: not a config memest can read: expected a DeepSpeed config (zero_optimization, "
      "train_micro_batch_size_per_gpu) or a TrainingArguments JSON (per_device_train_batch_size)",
      tree.source));
}

FromTree read_tree(std::string_view text, const std::string& source, FromFormat& format) {
  if (has_extension(source, {".json"})) {
    FromTree tree = read_json_tree(text, source);
    format = json_format(tree);
    return tree;
  }
  if (has_extension(source, {".toml"})) {
    format = FromFormat::torchtitan;
    return read_toml_tree(text, source);
  }
  if (has_extension(source, {".yaml", ".yml"})) {
    FromTree tree = read_yaml_tree(text, source);
    format = yaml_format(tree);
    return format == FromFormat::megatron ? megatron_model_args(tree) : tree;
  }
  format = FromFormat::megatron;
  return read_args_tree(text, source);
}

}  // namespace

bool flags_name_model(const RunOptions& flags) {
  return flags.model || flags.config || flags.params || flags.architecture;
}

std::optional<FromReport> from_in_effect(const RunOptions& options) {
  if (!options.from) return std::nullopt;
  FromReport report = *options.from;
  std::erase_if(report.used, [&](const FromKey& k) {
    const RunOptionInfo& info = run_option(k.flag);
    if (info.text) return !(options.*info.text) || (options.*info.text)->where != k.where;
    return !(options.*info.boolean) || (options.*info.boolean)->where != k.where;
  });
  return report;
}

RunOptions parse_from_text(std::string_view text, const std::string& source,
                           std::span<const std::string> overrides, const RunOptions& flags) {
  FromFormat format = FromFormat::torchtune;
  FromTree tree = read_tree(text, source, format);
  for (const auto& o : overrides) apply_override(tree, format, o);
  switch (format) {
    case FromFormat::torchtune:
      return map_torchtune(tree, flags);
    case FromFormat::litgpt:
      return map_litgpt(tree, flags);
    case FromFormat::torchtitan:
      return map_torchtitan(tree, flags);
    case FromFormat::deepspeed:
      return map_deepspeed(tree, flags);
    case FromFormat::training_args:
      return map_training_args(tree, flags);
    case FromFormat::axolotl:
      return map_axolotl(tree, flags);
    case FromFormat::accelerate:
      return map_accelerate(tree, flags);
    case FromFormat::megatron:
      break;
  }
  return map_megatron(tree, flags);
}

RunOptions load_from_file(const std::string& path, std::span<const std::string> overrides,
                          const RunOptions& flags) {
  return parse_from_text(detail::read_config_file(path), path, overrides, flags);
}

}  // namespace memest
