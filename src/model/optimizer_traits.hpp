// Private to the core: what each optimizer keeps and what its step allocates, stated once
// (src/model/optimizer.cpp holds the table). The categories (optimizer_bytes, paged_state_bytes)
// and the walk (src/model/model_state.cpp: optimizer_sizes, one_tensor_temporaries) read it.
#pragma once

#include <memest/optimizer.hpp>

#include <array>
#include <cstdint>
#include <string_view>

namespace memest::detail {

/// An option of OptimizerSpec that adds a state or a temporary; `always` for none.
enum class OptimizerOption { always, amsgrad, nesterov, momentum, centered, first_moment };

/// Whether `spec` has `option` set (`always`: true).
bool has_option(const OptimizerSpec& spec, OptimizerOption option);

/// One elementwise state tensor: one element per trainable parameter, kept when `when` is set.
struct StateName {
  std::string_view name;  ///< as in optimizer.state: "exp_avg", ...
  OptimizerOption when = OptimizerOption::always;
};

/// How the states that are not elementwise follow the tensors' shapes.
enum class StateShape {
  elementwise,  ///< only the `states` below
  factored,     ///< transformers.Adafactor: a row and a column vector per matrix
  blockwise8,   ///< bitsandbytes' 8-bit states with an absmax per block
};

/// What a step temporary spans, over the trainable tensors in step order.
enum class Span {
  none,
  group,    ///< every trainable element: foreach's batched ops span a parameter group
  pair2,    ///< the largest 2n + n of the previous tensor: this tensor's two and the last one
  pair1,    ///< the largest n + n of the previous tensor
  largest,  ///< the largest tensor
};

/// The element a temporary is made of.
enum class TempWidth { state, grad, fp32 };

/// One temporary of a step: `copies` tensors of `span` elements of `width`, plus, with
/// `scalars`, the step's 0-dim tensors (an 8-byte one and one of the state dtype). It exists
/// only when `when` is set.
struct Temporary {
  Span span = Span::none;
  std::uint64_t copies = 1;
  TempWidth width = TempWidth::state;
  bool scalars = false;
  OptimizerOption when = OptimizerOption::always;
};

/// The temporaries of one implementation at the step's worst moment: the sum of `terms`, or
/// with `larger` the larger of the two.
struct StepTemporaries {
  std::array<Temporary, 2> terms{};
  bool larger = false;
};

/// Everything memest knows of one optimizer kind.
struct OptimizerTraits {
  OptimizerKind kind;
  std::string_view name;              ///< the config spelling (optimizer_name)
  std::array<StateName, 3> states{};  ///< elementwise states; empty names unused
  StateShape shape = StateShape::elementwise;
  /// PyTorch 2.x keeps a 4-byte fp32 `step` tensor per trainable parameter tensor.
  bool step_counter = false;
  /// By OptimizerImpl (foreach, single, fused); a CPU step runs the single-tensor one.
  std::array<StepTemporaries, 3> temporaries{};
  std::string_view temporaries_name;  ///< what they are, for --explain
  /// bitsandbytes has a paged version (PagedAdamW, PagedAdamW8bit, PagedLion).
  bool pageable = false;
  /// The states are made from the gradient upcast to fp32, whatever the policy's state dtype
  /// (transformers.Adafactor: grad.float(), then torch.zeros(...).to(grad)).
  bool fp32_states = false;
};

/// The row of `kind`.
const OptimizerTraits& traits_of(OptimizerKind kind);

/// The elementwise states `spec` keeps (its options applied): elements per trainable parameter.
std::uint64_t elementwise_states(const OptimizerSpec& spec);

/// The sizes a step's temporaries span: the largest 2n + previous and n + previous over the
/// trainable tensors in step order, the largest tensor, and all of their elements.
struct StepShape {
  std::uint64_t pair2 = 0, pair1 = 0, largest = 0, group = 0;
};

/// Bytes of `spec`'s step temporaries when `impl` runs it (a CPU step runs the single-tensor
/// one), over tensors of `shape`, the state and gradient elements `state_width` and
/// `grad_width` bytes wide.
std::uint64_t temporaries_bytes(const OptimizerSpec& spec, OptimizerImpl impl,
                                const StepShape& shape, std::uint64_t state_width,
                                std::uint64_t grad_width);

}  // namespace memest::detail
