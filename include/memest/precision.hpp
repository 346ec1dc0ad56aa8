#pragma once

#include <memest/dtype.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace memest {

/// Where each category of training memory keeps its bytes: one dtype per category.
/// A policy describes a mechanism, so every byte count follows from it and the model.
struct PrecisionPolicy {
  std::string name;           ///< preset name, or "custom" once a dtype is overridden
  Dtype param = Dtype::fp32;  ///< the model's stored parameters
  std::optional<Dtype>
      working;  ///< autocast's per-forward copies of matmul weights, kept for backward
  std::optional<Dtype> master;      ///< master weights held by the optimizer (mixed precision)
  Dtype grad = Dtype::fp32;         ///< gradients of the trainable parameters
  std::optional<Dtype> grad_accum;  ///< a separate persistent gradient accumulation buffer
  Dtype state = Dtype::fp32;        ///< optimizer states (momentum, variance, ...)
  Dtype activation = Dtype::fp32;   ///< dtype of matmul outputs, so of most saved activations
  bool autocast = false;            ///< ops run under torch.autocast (norms, softmax, loss in fp32)
  std::string summary;              ///< one line: which framework setting this is

  bool operator==(const PrecisionPolicy&) const = default;
};

/// Preset names, in display order: fp32, amp, amp-bf16, mixed, mixed-bf16, mixed-fp32grad,
/// mixed-bf16-fp32grad, bf16, fp16.
std::span<const std::string_view> precision_names();

/// The named policy; throws Error listing the accepted names.
PrecisionPolicy precision_preset(std::string_view name);

/// Per-category overrides given by flags or a config file; a set field replaces the preset's.
struct PrecisionOverrides {
  std::optional<Dtype> param, grad, state, activation;
  std::optional<std::optional<Dtype>> master;      ///< nullopt inside: "none"
  std::optional<std::optional<Dtype>> working;     ///< nullopt inside: "none"
  std::optional<std::optional<Dtype>> grad_accum;  ///< nullopt inside: "none"
  bool any() const {
    return param || grad || state || activation || master || working || grad_accum;
  }
};

/// Applies overrides to a preset. The result is named "<preset>+overrides" when anything changed.
PrecisionPolicy apply_overrides(PrecisionPolicy policy, const PrecisionOverrides& overrides);

/// Parses a dtype or "none" for the optional categories (master, working copies, accumulation).
std::optional<Dtype> parse_optional_dtype(std::string_view text);

}  // namespace memest
