#pragma once
// What memest --from read from a framework's config file: carried from the options through the
// resolved run to the report (docs/from.md).

#include <string>
#include <vector>

namespace memest {

/// A key of a framework's config file (memest --from) that set a run option.
struct FromKey {
  std::string key;    ///< "batch_size", "tokenizer.max_seq_len", "micro-batch-size"
  std::string value;  ///< as the file (or its override) gives it
  std::string flag;   ///< the option it set ("--batch")
  std::string where;  ///< the option's `where`: "recipe.yaml: batch_size"
};

/// What `memest --from FILE` read (docs/from.md): the file, its framework, the keys that set
/// options and the keys that change memory in ways memest does not model.
struct FromReport {
  std::string file;
  std::string format;                     ///< "torchtune", "litgpt", "torchtitan", "megatron"
  std::vector<FromKey> used;              ///< in file order
  std::vector<std::string> not_modelled;  ///< "fsdp_cpu_offload: ..." one line per key
};

}  // namespace memest
