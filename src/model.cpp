#include <memest/error.hpp>
#include <memest/model.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <array>

namespace memest {
namespace {

constexpr std::array<std::string_view, 10> kRoleNames = {
    "embedding", "position", "attention", "mlp",     "norm",
    "head",      "router",   "expert",    "adapter", "other"};

template <typename Pred, typename Value>
std::uint64_t sum_groups(const Inventory& inv, Pred pred, Value value) {
  std::uint64_t total = 0;
  for (const auto& g : inv.groups) {
    if (pred(g)) total = checked_add(total, value(g));
  }
  return total;
}

}  // namespace

std::string_view role_name(Role role) { return kRoleNames[static_cast<std::size_t>(role)]; }

std::span<const std::string_view> role_names() { return kRoleNames; }

Role parse_role(std::string_view text) {
  for (std::size_t i = 0; i < kRoleNames.size(); ++i) {
    if (kRoleNames[i] == text) return static_cast<Role>(i);
  }
  throw Error(fmt::format("unknown role \"{}\" (expected one of: {})", text,
                          fmt::join(kRoleNames, ", ")));
}

std::uint64_t TensorGroup::tensor_elements() const { return checked_mul(rows, cols); }

std::uint64_t TensorGroup::elements() const { return checked_mul(tensor_elements(), count); }

std::uint64_t parameter_count(const Inventory& inv) {
  return sum_groups(inv, [](const TensorGroup&) { return true; },
                    [](const TensorGroup& g) { return g.elements(); });
}

std::uint64_t trainable_count(const Inventory& inv) {
  return sum_groups(inv, [](const TensorGroup& g) { return g.trainable; },
                    [](const TensorGroup& g) { return g.elements(); });
}

std::uint64_t tensor_count(const Inventory& inv) {
  return sum_groups(inv, [](const TensorGroup&) { return true; },
                    [](const TensorGroup& g) { return g.count; });
}

std::uint64_t trainable_tensor_count(const Inventory& inv) {
  return sum_groups(inv, [](const TensorGroup& g) { return g.trainable; },
                    [](const TensorGroup& g) { return g.count; });
}

std::uint64_t matmul_weight_count(const Inventory& inv, bool trainable_only) {
  return sum_groups(inv,
                    [&](const TensorGroup& g) { return g.matmul && (g.trainable || !trainable_only); },
                    [](const TensorGroup& g) { return g.elements(); });
}

ModelSpec model_from_count(std::uint64_t params) {
  ModelSpec m;
  m.name = format_count_short(params) + " parameters";
  TensorGroup all{"parameters", Role::other, 1, params, 1, true, true};
  m.inventory.groups.push_back(all);
  m.inventory.shapes_known = false;
  m.active_params = params;
  return m;
}

}  // namespace memest
