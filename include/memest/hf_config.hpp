#pragma once

#include <memest/model.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// The Hugging Face model_type values parse_hf_config understands, sorted. The legacy Falcon
/// spellings "RefinedWebModel" and "RefinedWeb" are accepted too and read as "falcon".
std::span<const std::string_view> supported_model_types();

/// Reads a Hugging Face config.json (comments allowed) into a model: its architecture, the
/// parameter inventory and the parameters active per token. Keys absent from the file take the
/// defaults of the transformers config class of that model_type; the sizes that decide the
/// count (vocab, hidden, layers, heads, MLP width) are required. The count is that of the class
/// transformers instantiates for the model_type: *ForCausalLM / T5ForConditionalGeneration, and
/// BertModel / RobertaModel (with pooler) for the encoders, whose task heads vary.
/// Throws Error as `<source>: <json pointer>: <problem>`.
ModelSpec parse_hf_config(std::string_view json_text, const std::string& source);

/// parse_hf_config on a file; throws Error `<path>: cannot open file: <reason>`.
ModelSpec load_hf_config(const std::string& path);

/// One model preset shipped with memest (configs/models/<name>.json, embedded in the binary).
struct PresetInfo {
  std::string name;             ///< e.g. "llama-2-7b"
  std::string family;           ///< the model_type, e.g. "llama"
  std::uint64_t params;         ///< total parameters
  std::uint64_t active_params;  ///< parameters used per token (MoE top-k); = params when dense
  /// The Hugging Face Hub id the config is from: the https://huggingface.co/<id> link on the
  /// file's first line, e.g. "meta-llama/Llama-2-7b-hf".
  std::string hub_id;
  std::uint64_t layers = 0;             ///< layers (encoder + decoder for T5)
  std::uint64_t hidden = 0;             ///< hidden size
  std::uint64_t experts = 0;            ///< routed experts per MoE layer, 0 when dense
  std::uint64_t experts_per_token = 0;  ///< MoE top-k
  bool tied = false;                    ///< lm_head shares the embedding
  bool state_space = false;             ///< Mamba: selective-scan layers, no attention
};

/// All presets, sorted by name.
std::vector<PresetInfo> model_presets();

/// The presets whose name, Hub id or family contains `filter` (case-insensitive); all when empty.
std::vector<PresetInfo> model_presets(std::string_view filter);

/// The local Hugging Face Hub cache as huggingface_hub locates it: $HF_HUB_CACHE, else
/// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub.
/// `env` returns a variable's value or nullptr; empty when none of them is set.
std::string hf_hub_cache(const char* (*env)(const char*));

/// The model `--model NAME` names: a preset by its name; else the preset whose Hub id is NAME
/// (case-insensitive, e.g. "Qwen/Qwen3-8B"); else, for an "org/name" id, its config.json in the
/// local Hub cache `hub_cache` (models--org--name/snapshots/<refs/main, or the only
/// snapshot>/config.json), with ModelSpec::source naming the file read. Never uses the network.
/// Throws Error saying how to get the config when neither has it.
ModelSpec load_named_model(std::string_view name, const std::string& hub_cache);

/// The preset `name`; throws Error `unknown model preset "x" (did you mean "y"?; see 'memest
/// models')` for an unknown name.
ModelSpec load_model_preset(std::string_view name);

}  // namespace memest
