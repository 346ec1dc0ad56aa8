#include <memest/error.hpp>
#include <memest/precision.hpp>

#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

namespace memest {
namespace {

constexpr std::array<std::string_view, 9> kPolicyNames = {
    "fp32", "amp", "amp-bf16", "mixed", "mixed-bf16", "mixed-fp32grad", "mixed-bf16-fp32grad",
    "bf16", "fp16"};

// Autocast (torch.amp): the model stays fp32 and so do its grads and the optimizer; matmuls
// run in half precision on copies of the weights, which autograd keeps for backward.
PrecisionPolicy autocast(std::string name, Dtype half, std::string_view summary) {
  return {std::move(name), Dtype::fp32, half, std::nullopt, Dtype::fp32,
          std::nullopt,    Dtype::fp32, half, true,         std::string(summary)};
}

// Master-weight mixed precision (Apex O2, DeepSpeed fp16/bf16, Megatron): half-precision model
// and grads, fp32 master weights and fp32 optimizer states owned by the optimizer.
PrecisionPolicy master_weights(std::string name, Dtype half, Dtype grad, std::string_view summary) {
  return {std::move(name), half,        std::nullopt, Dtype::fp32, grad,
          std::nullopt,    Dtype::fp32, half,         false,       std::string(summary)};
}

PrecisionPolicy pure(std::string name, Dtype d, std::string_view summary) {
  return {std::move(name),     d, std::nullopt, std::nullopt, d, std::nullopt, d, d, false,
          std::string(summary)};
}

}  // namespace

std::span<const std::string_view> precision_names() { return kPolicyNames; }

PrecisionPolicy precision_preset(std::string_view name) {
  if (name == "fp32") return pure("fp32", Dtype::fp32, "everything in fp32");
  if (name == "amp") {
    return autocast("amp", Dtype::fp16,
                    "PyTorch torch.autocast(float16) + GradScaler: fp32 model, grads, states");
  }
  if (name == "amp-bf16") {
    return autocast("amp-bf16", Dtype::bf16,
                    "PyTorch torch.autocast(bfloat16): fp32 model, grads, states");
  }
  if (name == "mixed") {
    return master_weights("mixed", Dtype::fp16, Dtype::fp16,
                          "fp16 model and grads, fp32 master weights and states (Apex O2, "
                          "DeepSpeed fp16)");
  }
  if (name == "mixed-bf16") {
    return master_weights("mixed-bf16", Dtype::bf16, Dtype::bf16,
                          "bf16 model and grads, fp32 master weights and states (DeepSpeed bf16)");
  }
  if (name == "mixed-fp32grad") {
    return master_weights("mixed-fp32grad", Dtype::fp16, Dtype::fp32,
                          "fp16 model, fp32 gradients (Megatron's main_grad, accumulated in "
                          "fp32), fp32 master weights and states");
  }
  if (name == "mixed-bf16-fp32grad") {
    return master_weights("mixed-bf16-fp32grad", Dtype::bf16, Dtype::fp32,
                          "bf16 model, fp32 gradients (Megatron's main_grad, accumulated in "
                          "fp32), fp32 master weights and states");
  }
  if (name == "bf16") return pure("bf16", Dtype::bf16, "pure bf16: model, grads, states in bf16");
  if (name == "fp16") return pure("fp16", Dtype::fp16, "pure fp16: model, grads, states in fp16");
  throw Error(fmt::format("unknown precision policy \"{}\" (expected one of: {})", name,
                          fmt::join(kPolicyNames, ", ")));
}

PrecisionPolicy apply_overrides(PrecisionPolicy policy, const PrecisionOverrides& o) {
  if (!o.any()) return policy;
  if (o.param) policy.param = *o.param;
  if (o.grad) policy.grad = *o.grad;
  if (o.state) policy.state = *o.state;
  if (o.activation) policy.activation = *o.activation;
  if (o.master) policy.master = *o.master;
  if (o.working) policy.working = *o.working;
  if (o.grad_accum) policy.grad_accum = *o.grad_accum;
  // The preset's summary no longer holds; say what was changed instead.
  std::vector<std::string> changed;
  auto note = [&](const char* what, const auto& given, const std::optional<Dtype>& now) {
    if (given) changed.push_back(fmt::format("{} {}", what, now ? dtype_name(*now) : "none"));
  };
  note("param", o.param, policy.param);
  note("working copy", o.working, policy.working);
  note("master", o.master, policy.master);
  note("grad", o.grad, policy.grad);
  note("grad accumulation", o.grad_accum, policy.grad_accum);
  note("state", o.state, policy.state);
  note("activation", o.activation, policy.activation);
  policy.summary = fmt::format("preset {} with {}", policy.name, fmt::join(changed, ", "));
  policy.name += "+overrides";
  return policy;
}

std::optional<Dtype> parse_optional_dtype(std::string_view text) {
  if (text == "none") return std::nullopt;
  try {
    return parse_dtype(text);
  } catch (const Error&) {
    throw Error(fmt::format("unknown dtype \"{}\" (expected none or one of: {})", text,
                            fmt::join(dtype_names(), ", ")));
  }
}

}  // namespace memest
