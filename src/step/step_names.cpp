// The names of the step's enums (include/memest/step.hpp): scopes, phases and moments as the
// report and the JSON spell them, and the step's time order (the parts' names and labels are in
// memory_kinds.cpp).
#include <memest/step.hpp>

#include <array>

namespace memest {
namespace {

constexpr std::array<std::string_view, kScopeCount> kScopeNames = {
    "layer",  "dense_mlp", "moe_mlp", "checkpoint", "core",
    "shared", "embed",     "head",    "state",      "transient"};

constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {
    "forward", "backward", "grad_copy", "optimizer", "master_copy", "zero_grad"};

// Each moment's names: at no layer or at every layer (the timeline), at the last layer, at the
// first.
struct MomentNames {
  std::string_view any, last, first;
};
constexpr std::array<MomentNames, kMomentKindCount> kMoments = {{
    {"forward_attention", "forward_attention", "forward_attention"},
    {"forward_end", "", ""},
    {"backward_start", "", ""},
    {"optimizer_step_in_backward_head", "", ""},
    {"backward_mlp", "backward_mlp_last_layer", "backward_mlp_first_layer"},
    {"optimizer_step_in_backward", "optimizer_step_in_backward_last_layer",
     "optimizer_step_in_backward_first_layer"},
    {"backward_attention", "backward_attention_last_layer", "backward_attention_first_layer"},
    {"post_backward", "post_backward_last_layer", "post_backward_first_layer"},
    {"backward_end", "", ""},
    {"optimizer_step_in_backward_embedding", "", ""},
    {"grad_copy", "", ""},
    {"optimizer", "", ""},
    {"master_copy", "", ""},
    {"zero_grad", "", ""},
}};

constexpr std::size_t index(MomentKind kind) { return static_cast<std::size_t>(kind); }

// The moments inside one layer's backward: backward_mlp to post_backward.
constexpr std::size_t kFirstInLayer = index(MomentKind::backward_mlp);
constexpr std::size_t kInLayer = index(MomentKind::post_backward) - kFirstInLayer + 1;

}  // namespace

std::string_view scope_name(Scope scope) { return kScopeNames[static_cast<std::size_t>(scope)]; }

std::string_view phase_name(Phase phase) { return kPhaseNames[static_cast<std::size_t>(phase)]; }

std::string_view moment_name(MomentId id) {
  const MomentNames& m = kMoments[index(id.kind)];
  if (id.at == LayerAt::last && !m.last.empty()) return m.last;
  if (id.at == LayerAt::first && !m.first.empty()) return m.first;
  return m.any;
}

std::uint32_t time_rank(MomentId id) {
  const std::size_t k = index(id.kind);
  if (k < kFirstInLayer) return static_cast<std::uint32_t>(k);
  if (k >= kFirstInLayer + kInLayer) return static_cast<std::uint32_t>(k + kInLayer);
  // One layer's backward moments, the last layer's before the first's.
  return static_cast<std::uint32_t>(k + (id.at == LayerAt::first ? kInLayer : 0));
}

bool is_whole_phase(MomentKind kind) { return index(kind) >= index(MomentKind::grad_copy); }

}  // namespace memest
