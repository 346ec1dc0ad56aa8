// The parts of memory a live tensor belongs to (include/memest/step.hpp).
#include <memest/step.hpp>

#include <array>

namespace memest {
namespace {

constexpr std::array<std::string_view, kPartCount> kPartNames = {
    "params",      "master_params", "optimizer_state", "grads",   "master_grads", "grad_accum",
    "activations", "param_casts",   "inputs",          "buffers", "other"};

constexpr std::array<std::string_view, kPartCount> kPartLabels = {
    "params",       "master params",     "optimizer states",     "grads",
    "master grads", "grad accumulation", "activations",          "weight copies",
    "inputs",       "buffers",           "temporaries and other"};

constexpr std::array<std::string_view, kScopeCount> kScopeNames = {
    "layer",  "dense_mlp", "moe_mlp", "checkpoint", "core",
    "shared", "embed",     "head",    "state",      "transient"};

}  // namespace

std::string_view scope_name(Scope scope) { return kScopeNames[static_cast<std::size_t>(scope)]; }

std::string_view part_name(Part part) { return kPartNames[static_cast<std::size_t>(part)]; }
std::string_view part_label(Part part) { return kPartLabels[static_cast<std::size_t>(part)]; }

}  // namespace memest
