#pragma once

#include <memest/dtype.hpp>
#include <memest/model.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// Optimizers by their config spelling. States follow torch.optim (sgd .. rmsprop),
/// lucidrains/lion-pytorch (lion), transformers.Adafactor (adafactor) and
/// bitsandbytes.optim.Adam8bit (adam8bit). docs/method.md lists each state with its source.
enum class OptimizerKind {
  sgd,
  sgd_momentum,
  adam,
  adamw,
  adagrad,
  rmsprop,
  lion,
  adafactor,
  adam8bit
};

/// Names accepted for --optimizer, in display order.
std::span<const std::string_view> optimizer_names();
/// Config spelling of a kind: "sgd-momentum", "adamw", ...
std::string_view optimizer_name(OptimizerKind kind);
/// Parses a name (also "sgd+momentum" and "momentum"); throws Error listing the accepted names.
OptimizerKind parse_optimizer(std::string_view text);

/// PyTorch's optimizer implementations, by their temporaries.
enum class OptimizerImpl { foreach, single, fused };
/// Names accepted for --optimizer-impl: foreach, single, fused.
std::span<const std::string_view> optimizer_impl_names();
std::string_view optimizer_impl_name(OptimizerImpl impl);
OptimizerImpl parse_optimizer_impl(std::string_view text);

/// An optimizer and the options that change its state.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::adamw;
  bool nesterov = false;      ///< sgd-momentum: Nesterov update (same state)
  bool amsgrad = false;       ///< adam/adamw: keeps max_exp_avg_sq, a third state
  bool momentum = false;      ///< rmsprop: momentum_buffer
  bool centered = false;      ///< rmsprop: grad_avg
  bool first_moment = false;  ///< adafactor: keeps exp_avg (beta1 set)
  /// How the step runs on a GPU (PyTorch's implementations): foreach (the default: batched
  /// ops whose temporaries span a whole parameter group), single (one tensor at a time) or fused
  /// (one kernel, no temporaries; its `step` counters are device tensors, as with capturable).
  OptimizerImpl impl = OptimizerImpl::foreach;
  /// bitsandbytes' paged optimizers (PagedAdamW, PagedAdamW8bit, ...): the states live in CUDA
  /// unified memory (cudaMallocManaged), outside the caching allocator and its statistics;
  /// reported apart from the device peak (docs/techniques.md).
  bool paged = false;

  bool operator==(const OptimizerSpec&) const = default;
};

/// One kind of state tensor, summed over the trainable parameters.
struct StateTerm {
  std::string name;  ///< as in optimizer.state: "exp_avg", "absmax1", ...
  Dtype dtype;
  std::uint64_t bytes;
  std::string formula;  ///< how the bytes follow, e.g. "4 B x 6,738,415,616 params"
};

/// Optimizer state bytes for one model copy (no sharding).
struct OptimizerBytes {
  std::vector<StateTerm> states;  ///< device tensors, one entry per state kind
  std::uint64_t state_bytes = 0;  ///< sum of `states`
  /// PyTorch's 4-byte fp32 `step` tensor per trainable parameter tensor (Adam, AdamW, Adagrad,
  /// RMSprop in PyTorch 2.x); 0 for the others.
  std::uint64_t step_bytes = 0;
  bool step_counted = true;              ///< false when tensors are unknown (a bare --params count)
  std::vector<std::string> assumptions;  ///< what was assumed when shapes were unknown
};

/// The optimizer's persistent state for the trainable tensors of `inventory`, states in
/// `state_dtype` (fp32 for master-weight policies, the param dtype for pure bf16).
/// Factored (adafactor) and blockwise (adam8bit) states use each tensor's shape; with a bare
/// count they assume the shapes named in `assumptions`.
OptimizerBytes optimizer_bytes(const OptimizerSpec& spec, const Inventory& inventory,
                               Dtype state_dtype);

/// bitsandbytes' paged optimizers page a state tensor (state1, state2) only when its parameter
/// has at least this many elements (Optimizer8bit.get_state_buffer: numel < 1e5 stays a device
/// tensor); the 8-bit absmax and qmap tensors are always device tensors.
inline constexpr std::uint64_t kPagedMinElements = 100000;

/// The bytes of a paged optimizer's states that live in CUDA unified memory: state1/state2 of
/// the trainable tensors of kPagedMinElements or more (uint8 for adam8bit, else `state_dtype`).
/// 0 when `spec.paged` is false. A bare count (shapes unknown) counts every parameter.
std::uint64_t paged_state_bytes(const OptimizerSpec& spec, const Inventory& inventory,
                                Dtype state_dtype);

/// Elements per quantization block of bitsandbytes' blockwise 8-bit optimizer states.
inline constexpr std::uint64_t kAdam8bitBlock = 256;
/// bitsandbytes keeps 32-bit states for tensors with fewer elements than this (min_8bit_size).
inline constexpr std::uint64_t kAdam8bitMinSize = 4096;

}  // namespace memest
