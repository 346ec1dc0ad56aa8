#include "base/names.hpp"
#include "model/optimizer_traits.hpp"

#include <memest/error.hpp>
#include <memest/optimizer.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <utility>

namespace memest {
namespace detail {
namespace {

using Opt = OptimizerOption;
using W = TempWidth;

// One temporary (one term of the table's steps).
constexpr StepTemporaries only(Temporary t) { return {.terms = {t, Temporary{}}}; }
// The same temporaries whichever implementation runs the step.
constexpr std::array<StepTemporaries, 3> any_impl(Temporary t) {
  return {only(t), only(t), only(t)};
}

// Each optimizer's states (torch.optim, lucidrains/lion-pytorch, transformers.Adafactor,
// bitsandbytes.optim.Adam8bit; docs/method.md) and its step's temporaries at their worst moment
// (docs/activation-derivation.md §4.4), in OptimizerKind order. Temporaries are listed for the
// foreach, single-tensor and fused steps: foreach holds a whole group's intermediate, the
// single-tensor step those of the largest tensors (with the step's 0-dim scalars), the fused
// kernel none.
constexpr std::array<OptimizerTraits, 9> kTraits = {{
    {.kind = OptimizerKind::sgd, .name = "sgd", .temporaries_name = "optimizer step temporaries"},
    {.kind = OptimizerKind::sgd_momentum,
     .name = "sgd-momentum",
     .states = {{{"momentum_buffer"}}},
     .temporaries = {only({.span = Span::group, .width = W::grad, .when = Opt::nesterov}), {}, {}},
     .temporaries_name = "SGD step: Nesterov look-ahead (one per gradient)"},
    {.kind = OptimizerKind::adam,
     .name = "adam",
     .states = {{{"exp_avg"}, {"exp_avg_sq"}, {"max_exp_avg_sq", Opt::amsgrad}}},
     .step_counter = true,
     .temporaries = {only({.span = Span::group}), only({.span = Span::pair2, .scalars = true}), {}},
     .temporaries_name = "Adam step: exp_avg_sq.sqrt() and the quotient (denom)",
     .pageable = true},
    {.kind = OptimizerKind::adamw,
     .name = "adamw",
     .states = {{{"exp_avg"}, {"exp_avg_sq"}, {"max_exp_avg_sq", Opt::amsgrad}}},
     .step_counter = true,
     .temporaries = {only({.span = Span::group}), only({.span = Span::pair2, .scalars = true}), {}},
     .temporaries_name = "Adam step: exp_avg_sq.sqrt() and the quotient (denom)",
     .pageable = true},
    {.kind = OptimizerKind::adagrad,
     .name = "adagrad",
     .states = {{{"sum"}}},
     .step_counter = true,
     .temporaries = {only({.span = Span::group}), only({.span = Span::pair1, .scalars = true}), {}},
     .temporaries_name = "Adagrad step: state_sum.sqrt() (this tensor's and the previous)"},
    {.kind = OptimizerKind::rmsprop,
     .name = "rmsprop",
     .states = {{{"square_avg"}, {"momentum_buffer", Opt::momentum}, {"grad_avg", Opt::centered}}},
     .step_counter = true,
     .temporaries = {StepTemporaries{.terms = {Temporary{.span = Span::group},
                                               {.span = Span::group, .when = Opt::centered}}},
                     StepTemporaries{.terms = {Temporary{.span = Span::pair1},
                                               {.span = Span::largest, .scalars = true}},
                                     .larger = true},
                     {}},
     .temporaries_name = "RMSprop step: square_avg.sqrt() (this tensor's and the previous)"},
    {.kind = OptimizerKind::lion,
     .name = "lion",
     .states = {{{"exp_avg"}}},
     .temporaries = any_impl({.span = Span::largest, .copies = 2}),
     .temporaries_name = "Lion step: interpolated update and its sign (largest tensor)",
     .pageable = true},
    {.kind = OptimizerKind::adafactor,
     .name = "adafactor",
     .states = {{{"exp_avg", Opt::first_moment}}},
     .shape = StateShape::factored,
     .temporaries = any_impl({.span = Span::largest, .copies = 2, .width = W::fp32}),
     .temporaries_name = "Adafactor step: factored update buffers (fp32, largest tensor)",
     .fp32_states = true},
    {.kind = OptimizerKind::adam8bit,
     .name = "adam8bit",
     .shape = StateShape::blockwise8,
     .temporaries_name = "optimizer step temporaries",
     .pageable = true},
}};

constexpr std::array<std::string_view, kTraits.size()> names_of_traits() {
  std::array<std::string_view, kTraits.size()> names{};
  for (std::size_t i = 0; i < kTraits.size(); ++i) names[i] = kTraits[i].name;
  return names;
}
constexpr std::array<std::string_view, kTraits.size()> kNames = names_of_traits();

constexpr bool in_kind_order() {
  for (std::size_t i = 0; i < kTraits.size(); ++i) {
    if (static_cast<std::size_t>(kTraits[i].kind) != i) return false;
  }
  return true;
}
static_assert(in_kind_order(), "kTraits lists the optimizers in OptimizerKind order");

constexpr std::array<std::pair<std::string_view, OptimizerKind>, 4> kAliases = {{
    {"sgd+momentum", OptimizerKind::sgd_momentum},
    {"momentum", OptimizerKind::sgd_momentum},
    {"adamw8bit", OptimizerKind::adam8bit},
    {"adam-8bit", OptimizerKind::adam8bit},
}};

}  // namespace

bool has_option(const OptimizerSpec& spec, OptimizerOption option) {
  switch (option) {
    case Opt::always:
      return true;
    case Opt::amsgrad:
      return spec.amsgrad;
    case Opt::nesterov:
      return spec.nesterov;
    case Opt::momentum:
      return spec.momentum;
    case Opt::centered:
      return spec.centered;
    case Opt::first_moment:
      return spec.first_moment;
  }
  return false;
}

const OptimizerTraits& traits_of(OptimizerKind kind) {
  return kTraits[static_cast<std::size_t>(kind)];
}

std::uint64_t elementwise_states(const OptimizerSpec& spec) {
  std::uint64_t n = 0;
  for (const StateName& s : traits_of(spec.kind).states) {
    if (!s.name.empty() && has_option(spec, s.when)) ++n;
  }
  return n;
}

namespace {

std::uint64_t temporary_bytes(const Temporary& t, const StepShape& shape, std::uint64_t es,
                              std::uint64_t eg) {
  std::uint64_t n = 0;
  switch (t.span) {
    case Span::none:
      return 0;
    case Span::group:
      n = shape.group;
      break;
    case Span::pair2:
      n = shape.pair2;
      break;
    case Span::pair1:
      n = shape.pair1;
      break;
    case Span::largest:
      n = shape.largest;
      break;
  }
  const std::uint64_t w = t.width == TempWidth::state ? es : t.width == TempWidth::grad ? eg : 4;
  return t.copies * w * n + (t.scalars ? 8 + es : 0);
}

}  // namespace

std::uint64_t temporaries_bytes(const OptimizerSpec& spec, OptimizerImpl impl,
                                const StepShape& shape, std::uint64_t state_width,
                                std::uint64_t grad_width) {
  const StepTemporaries& temps = traits_of(spec.kind).temporaries[static_cast<std::size_t>(impl)];
  std::uint64_t total = 0;
  for (const Temporary& t : temps.terms) {
    if (!has_option(spec, t.when)) continue;
    const std::uint64_t bytes = temporary_bytes(t, shape, state_width, grad_width);
    total = temps.larger ? std::max(total, bytes) : total + bytes;
  }
  return total;
}

}  // namespace detail

namespace {

using detail::kAliases;
using detail::kNames;

std::uint64_t isqrt(std::uint64_t n) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 0 && r > n / r) --r;
  while (r + 1 <= n / (r + 1)) ++r;
  return r;
}

// "4 B x 6,738,415,616 params", appended into one string of the right size (what
// fmt::format("{} B x {} params") gives, without a buffer to copy).
std::string params_formula(Dtype d, std::uint64_t n) {
  const std::string_view per = bytes_per_element_text(d);
  const std::string count = format_count(n);
  std::string out;
  out.reserve(per.size() + 5 + count.size() + 7);
  out.append(per).append(" B x ").append(count).append(" params");
  return out;
}

// transformers.Adafactor: a matrix keeps a row and a column second-moment vector
// (exp_avg_sq_row, exp_avg_sq_col); a vector keeps a full exp_avg_sq.
void add_adafactor(const Inventory& inv, Dtype d, OptimizerBytes& out) {
  std::uint64_t factored = 0, full = 0, elements = 0;
  for (const auto& g : inv.groups) {
    if (!g.trainable) continue;
    if (g.rows >= 2 && inv.shapes_known) {
      factored = checked_add(factored, checked_mul(g.rows + g.cols, g.count));
    } else if (inv.shapes_known) {
      full = checked_add(full, g.elements());
    }
    elements = checked_add(elements, g.elements());
  }
  if (!inv.shapes_known) {
    // Without shapes the smallest factored state is that of one square matrix; say so.
    const std::uint64_t side = isqrt(elements);
    factored = checked_mul(2, side);
    out.assumptions.push_back(fmt::format(
        "adafactor: shapes unknown, factored state assumes one square {}x{} matrix (a lower bound)",
        side, side));
  }
  if (factored > 0) {
    out.states.push_back({"exp_avg_sq_row+col", d, bytes_for(d, factored),
                          fmt::format("{} B x {} (rows + cols per matrix)", bytes_per_element(d),
                                      format_count(factored))});
  }
  if (full > 0) {
    out.states.push_back({"exp_avg_sq", d, bytes_for(d, full), params_formula(d, full)});
  }
  // state["RMS"] = self._rms(p_data_fp32): a 0-dim fp32 tensor per parameter tensor, on the
  // parameter's device (transformers optimization.py, Adafactor.step; measured as 156 B for the
  // 39 tensors of tests/data/truth_cuda's llama-m).
  if (inv.shapes_known) {
    const std::uint64_t tensors = trainable_tensor_count(inv);
    out.states.push_back({"RMS", Dtype::fp32, checked_mul(4, tensors),
                          fmt::format("4 B x {} tensors (0-dim)", format_count(tensors))});
  }
}

// bitsandbytes Adam8bit (block_wise): two uint8 states per element plus one fp32 absmax per
// 256-element block for each; tensors under 4096 elements keep fp32 states. The two 256-entry
// fp32 quantization maps are shared by all tensors.
void add_adam8bit(const Inventory& inv, OptimizerBytes& out) {
  std::uint64_t q8 = 0, blocks = 0, small = 0;
  for (const auto& g : inv.groups) {
    if (!g.trainable) continue;
    const auto n = g.tensor_elements();
    if (n < kAdam8bitMinSize && inv.shapes_known) {
      small = checked_add(small, g.elements());
      continue;
    }
    q8 = checked_add(q8, g.elements());
    blocks = checked_add(blocks, checked_mul(ceil_div(n, kAdam8bitBlock), g.count));
  }
  if (!inv.shapes_known) {
    out.assumptions.push_back(
        "adam8bit: tensors unknown, all parameters taken as 8-bit blockwise (no small fp32 "
        "tensors)");
  }
  out.states.push_back({"state1+state2", Dtype::int8, checked_mul(2, q8),
                        fmt::format("2 x 1 B x {} params", format_count(q8))});
  out.states.push_back(
      {"absmax1+absmax2", Dtype::fp32, checked_mul(8, blocks),
       fmt::format("2 x 4 B x {} blocks of {}", format_count(blocks), kAdam8bitBlock)});
  out.states.push_back(
      {"qmap1+qmap2", Dtype::fp32, std::uint64_t{2} * 256 * 4, "2 x 256 x 4 B, shared"});
  if (small > 0) {
    out.states.push_back({"state1+state2 (fp32, small tensors)", Dtype::fp32, checked_mul(8, small),
                          fmt::format("2 x 4 B x {} params in tensors < {} elements",
                                      format_count(small), kAdam8bitMinSize)});
  }
}

}  // namespace

std::span<const std::string_view> optimizer_names() { return kNames; }

namespace {
constexpr std::array<std::string_view, 3> kImplNames = {"foreach", "single", "fused"};
}  // namespace

std::span<const std::string_view> optimizer_impl_names() { return kImplNames; }
std::string_view optimizer_impl_name(OptimizerImpl impl) {
  return kImplNames[static_cast<std::size_t>(impl)];
}
OptimizerImpl parse_optimizer_impl(std::string_view text) {
  return detail::parse_enum<OptimizerImpl>(kImplNames, text, "optimizer implementation");
}

std::string_view optimizer_name(OptimizerKind kind) {
  return kNames[static_cast<std::size_t>(kind)];
}

OptimizerKind parse_optimizer(std::string_view text) {
  return detail::parse_enum<OptimizerKind>(kNames, text, "optimizer", kAliases);
}

OptimizerBytes optimizer_bytes(const OptimizerSpec& spec, const Inventory& inventory,
                               Dtype policy_state_dtype) {
  const detail::OptimizerTraits& traits = detail::traits_of(spec.kind);
  const Dtype state_dtype = traits.fp32_states ? Dtype::fp32 : policy_state_dtype;
  OptimizerBytes out;
  out.states.reserve(4);
  if (traits.shape == detail::StateShape::factored) add_adafactor(inventory, state_dtype, out);
  if (traits.shape == detail::StateShape::blockwise8) add_adam8bit(inventory, out);
  // The elementwise states after the shaped ones (Adafactor's exp_avg after its factored ones).
  const std::uint64_t n = trainable_count(inventory);
  // The formula is the same for each elementwise state: written into the first, copied from it.
  const std::size_t first = out.states.size();
  for (const detail::StateName& s : traits.states) {
    if (s.name.empty() || !detail::has_option(spec, s.when)) continue;
    out.states.push_back(
        {std::string(s.name), state_dtype, bytes_for(state_dtype, n),
         out.states.size() == first ? params_formula(state_dtype, n) : out.states[first].formula});
  }
  for (const auto& s : out.states) out.state_bytes = checked_add(out.state_bytes, s.bytes);
  if (traits.step_counter) {
    out.step_counted = inventory.shapes_known;
    if (inventory.shapes_known) out.step_bytes = checked_mul(4, trainable_tensor_count(inventory));
  }
  return out;
}

std::uint64_t paged_state_bytes(const OptimizerSpec& spec, const Inventory& inventory,
                                Dtype state_dtype) {
  const detail::OptimizerTraits& traits = detail::traits_of(spec.kind);
  if (!spec.paged || !traits.pageable) return 0;
  // bitsandbytes pages state1 and state2: the elementwise states, uint8 for the 8-bit ones.
  const bool eight = traits.shape == detail::StateShape::blockwise8;
  const std::uint64_t states = eight ? 2 : detail::elementwise_states(spec);
  std::uint64_t n = 0;
  for (const auto& g : inventory.groups) {
    if (!g.trainable || g.quant_state) continue;
    if (inventory.shapes_known && g.tensor_elements() < kPagedMinElements) continue;
    n = checked_add(n, g.elements());
  }
  const std::uint64_t per = eight ? 1 : bytes_for(state_dtype, 1);
  return checked_mul(checked_mul(states, per), n);
}

}  // namespace memest
