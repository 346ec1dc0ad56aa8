#pragma once
// memest --from: a framework's config file as a flat list of dotted key paths and their values
// (the YAML, TOML and argument-list readers all give one), with the launcher's KEY=VALUE
// overrides laid over it. The formats' mappings (from_formats.hpp) read it.

#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// One leaf of a config file: "optimizer._component_" with its text ("torch.optim.AdamW"); a
/// list of scalars keeps its items; an empty map or list is a leaf with no text.
struct FromValue {
  std::string path;                ///< dotted: "tokenizer.max_seq_len"; a list item "a.0.b"
  std::string text;                ///< the scalar as written ("True", "2e-5"); empty for null
  bool null = false;               ///< YAML null, `~`, or None given as an override
  bool list = false;               ///< a list of scalars: `items`
  std::vector<std::string> items;  ///< its items, as written
  std::string where;               ///< "recipe.yaml: batch_size" or "override batch_size=2"
};

/// A config file read: its leaves in file order.
struct FromTree {
  std::string source;  ///< the file as given
  std::vector<FromValue> values;

  /// The leaf at `path`, or nullptr.
  [[nodiscard]] const FromValue* find(std::string_view path) const;
  /// Whether any leaf lies under `prefix` ("model" holds "model._component_").
  [[nodiscard]] bool has_under(std::string_view prefix) const;
  /// Sets (or adds) the leaf at `path` to `text`, as an override says.
  void set(const std::string& path, const std::string& text, const std::string& where);
  /// Removes the leaf at `path` and every leaf under it; false when there was none.
  bool remove(std::string_view path);
};

/// The file's format, by what it holds.
enum class FromFormat {
  torchtune,
  litgpt,
  torchtitan,
  megatron,
  deepspeed,
  training_args,
  axolotl,
  accelerate
};

/// The format's name as docs/from.md and the JSON `from` object write it ("torchtune").
std::string_view from_format_name(FromFormat f);

/// The stack (--stack) a format implies ("torchtune"; "hf" for TrainingArguments); empty for a
/// DeepSpeed config, which the engine reads on its own or under the Trainer.
std::string_view from_format_stack(FromFormat f);

/// YAML text (torchtune, LitGPT, Megatron-LM's model_config.yaml) flattened; a parse error is
/// one line naming `source`, the line and column. Throws Error when memest was built without
/// MEMEST_FROM.
FromTree read_yaml_tree(std::string_view text, const std::string& source);

/// JSON text (a DeepSpeed config, a TrainingArguments JSON) flattened, as read_yaml_tree; read
/// by json_access, so its errors are those of every JSON file memest reads.
FromTree read_json_tree(std::string_view text, const std::string& source);

/// TOML text (torchtitan) flattened, as read_yaml_tree.
FromTree read_toml_tree(std::string_view text, const std::string& source);

/// A Megatron-LM command line kept in a file (`--num-layers 24 --bf16 ...`; `\` line
/// continuations, `#` comments and a leading `python pretrain_gpt.py` or `torchrun ...` allowed):
/// each --name a leaf "num-layers", a bare flag "true".
FromTree read_args_tree(std::string_view text, const std::string& source);

/// True when `s` is a YAML/TOML/override spelling of true; false for one of false; throws Error
/// naming `where` otherwise.
bool from_bool(const std::string& s, const std::string& where);

}  // namespace memest
