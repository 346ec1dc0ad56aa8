#pragma once
// memest --from FILE [KEY=VALUE ...]: the config file a training framework's launcher takes
// (a torchtune recipe, a LitGPT config, a torchtitan TOML, a Megatron-LM command line), with its
// overrides as that launcher takes them, read into the run options (docs/from.md).

#include <memest/run_options.hpp>

#include <span>
#include <string>
#include <string_view>

namespace memest {

/// Reads `text` (from file `source`, whose extension helps tell the format) with `overrides`
/// (KEY=VALUE, dotted paths; torchtune's ~KEY removes one) laid over it, into RunOptions whose
/// `where` strings name the file and key, and whose `from` lists the keys used and those that
/// change memory but are not modelled. `flags` are the run's own options (a Megatron-LM run's
/// gradient accumulation needs its --dp). Throws Error with one line naming the file, the key and
/// the problem.
RunOptions parse_from_text(std::string_view text, const std::string& source,
                           std::span<const std::string> overrides, const RunOptions& flags);

/// Reads the file at `path` as parse_from_text; `<path>: cannot open file: <reason>` when it
/// cannot be read.
RunOptions load_from_file(const std::string& path, std::span<const std::string> overrides,
                          const RunOptions& flags);

}  // namespace memest
