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

/// What the user asked for, before validation: flags and config files both fill this, and
/// flags override a file. Text values are parsed by resolve(), which names `where` on error.
struct RunOptions {
  // model: exactly one of these
  std::optional<Setting<std::string>> params;       ///< "7B", "6738415616"
  std::optional<Setting<std::string>> model;        ///< a preset name (configs/models)
  std::optional<Setting<std::string>> config;       ///< path to a Hugging Face config.json
  // optimizer
  std::optional<Setting<std::string>> optimizer;    ///< default adamw
  std::optional<Setting<bool>> nesterov, amsgrad, rmsprop_momentum, centered, first_moment,
      fused_optimizer;
  // precision
  std::optional<Setting<std::string>> precision;    ///< preset name; default fp32
  std::optional<Setting<bool>> amp;                 ///< short for precision amp
  std::optional<Setting<std::string>> param_dtype, grad_dtype, state_dtype, activation_dtype,
      master_dtype, working_dtype, grad_accum_dtype;
  // training
  std::optional<Setting<std::string>> batch, seq, grad_accum, attention, recompute, dropout;
};

/// Copies every setting present in `overrides` over `base`.
void merge(RunOptions& base, const RunOptions& overrides);

/// Validates and turns options into a RunSpec: parses counts and names, loads the model, applies
/// precision overrides. Throws Error naming the setting's `where`, the value and what is
/// accepted, e.g. `--optimizer: unknown optimizer "adamw8" (expected one of: ...)`.
RunSpec resolve(const RunOptions& options);

}  // namespace memest
