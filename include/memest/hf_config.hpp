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
};

/// All presets, sorted by name.
std::vector<PresetInfo> model_presets();

/// The preset `name`; throws Error `unknown model preset "x" (did you mean "y"?; see 'memest
/// models')` for an unknown name.
ModelSpec load_model_preset(std::string_view name);

}  // namespace memest
