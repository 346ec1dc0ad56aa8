#include "base/names.hpp"

#include <memest/error.hpp>
#include <memest/optimizer.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <utility>

namespace memest {
namespace {

constexpr std::array<std::string_view, 9> kNames = {
    "sgd", "sgd-momentum", "adam", "adamw", "adagrad", "rmsprop", "lion", "adafactor", "adam8bit"};

constexpr std::array<std::pair<std::string_view, OptimizerKind>, 4> kAliases = {{
    {"sgd+momentum", OptimizerKind::sgd_momentum},
    {"momentum", OptimizerKind::sgd_momentum},
    {"adamw8bit", OptimizerKind::adam8bit},
    {"adam-8bit", OptimizerKind::adam8bit},
}};

// Full-size states: one element per trainable parameter each.
std::vector<std::string_view> full_states(const OptimizerSpec& s) {
  switch (s.kind) {
    case OptimizerKind::sgd:
      return {};
    case OptimizerKind::sgd_momentum:
      return {"momentum_buffer"};
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      if (s.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
      return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::adagrad:
      return {"sum"};
    case OptimizerKind::rmsprop: {
      std::vector<std::string_view> v = {"square_avg"};
      if (s.momentum) v.push_back("momentum_buffer");
      if (s.centered) v.push_back("grad_avg");
      return v;
    }
    case OptimizerKind::lion:
      return {"exp_avg"};
    case OptimizerKind::adafactor:
    case OptimizerKind::adam8bit:
      return {};  // shape-dependent, handled apart
  }
  return {};
}

bool keeps_step_tensor(OptimizerKind k) {
  return k == OptimizerKind::adam || k == OptimizerKind::adamw || k == OptimizerKind::adagrad ||
         k == OptimizerKind::rmsprop;
}

std::uint64_t isqrt(std::uint64_t n) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(n)));
  while (r > 0 && r > n / r) --r;
  while (r + 1 <= n / (r + 1)) ++r;
  return r;
}

std::string params_formula(Dtype d, std::uint64_t n) {
  return fmt::format("{} B x {} params", bytes_per_element(d), format_count(n));
}

// transformers.Adafactor: a matrix keeps a row and a column second-moment vector
// (exp_avg_sq_row, exp_avg_sq_col); a vector keeps a full exp_avg_sq.
void add_adafactor(const OptimizerSpec& s, const Inventory& inv, Dtype d, OptimizerBytes& out) {
  std::uint64_t factored = 0, full = 0, first = 0;
  for (const auto& g : inv.groups) {
    if (!g.trainable) continue;
    if (g.rows >= 2 && inv.shapes_known) {
      factored = checked_add(factored, checked_mul(g.rows + g.cols, g.count));
    } else if (inv.shapes_known) {
      full = checked_add(full, g.elements());
    }
    first = checked_add(first, g.elements());
  }
  if (!inv.shapes_known) {
    // Without shapes the smallest factored state is that of one square matrix; say so.
    const std::uint64_t side = isqrt(first);
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
  if (s.first_moment) {
    out.states.push_back({"exp_avg", d, bytes_for(d, first), params_formula(d, first)});
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
                               Dtype state_dtype) {
  OptimizerBytes out;
  const std::uint64_t n = trainable_count(inventory);
  for (auto name : full_states(spec)) {
    out.states.push_back({std::string(name), state_dtype, bytes_for(state_dtype, n),
                          params_formula(state_dtype, n)});
  }
  if (spec.kind == OptimizerKind::adafactor) add_adafactor(spec, inventory, state_dtype, out);
  if (spec.kind == OptimizerKind::adam8bit) add_adam8bit(inventory, out);
  for (const auto& s : out.states) out.state_bytes = checked_add(out.state_bytes, s.bytes);
  if (keeps_step_tensor(spec.kind)) {
    out.step_counted = inventory.shapes_known;
    if (inventory.shapes_known) out.step_bytes = checked_mul(4, trainable_tensor_count(inventory));
  }
  return out;
}

std::uint64_t paged_state_bytes(const OptimizerSpec& spec, const Inventory& inventory,
                                Dtype state_dtype) {
  if (!spec.paged) return 0;
  const bool eight = spec.kind == OptimizerKind::adam8bit;
  const std::uint64_t states = eight ? 2 : full_states(spec).size();
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
