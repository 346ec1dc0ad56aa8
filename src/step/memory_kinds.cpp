// The one table of how every output names and colours a kind of memory: the table's rows, the
// terminal bar, the SVG pictures and the web page (which reads it from the WebAssembly module)
// all take a part's or a row's words and colour from here.
#include <memest/step.hpp>

#include <algorithm>
#include <array>

namespace memest {
namespace {

// The parts first, in Part's order (part_kind indexes them); then the rows that are no part.
// Colours: Tableau 20, one per kind.
constexpr std::array<MemoryKind, kPartCount + 3> kMemoryKinds = {{
    {"params", "params", "parameters", 0x4e79a7},
    {"master_params", "master_weights", "master weights", 0xa0cbe8},
    {"optimizer_state", "optimizer_states", "optimizer states", 0xf28e2b},
    {"grads", "grads", "gradients", 0x59a14f},
    {"master_grads", "", "master gradients", 0x8cd17d},
    {"grad_accum", "grad_accum", "grad accumulation buffer", 0xb6992d},
    {"activations", "activations", "activations", 0xe15759},
    {"param_casts", "working_copies", "autocast weight copies", 0x76b7b2},
    {"inputs", "", "inputs", 0x9c755f},
    {"buffers", "", "buffers", 0xbab0ac},
    {"other", "", "temporaries and other", 0xb07aa1},
    {"", "optimizer_step", "optimizer step counters", 0xffbe7d},
    {"", "optimizer_states_paged", "optimizer states, paged", 0xff9d9a},
    {"", "", "allocator rounding and context", 0xd7b5a6},
}};

}  // namespace

std::span<const MemoryKind> memory_kinds() { return kMemoryKinds; }

const MemoryKind& part_kind(Part part) { return kMemoryKinds[static_cast<std::size_t>(part)]; }

const MemoryKind& category_kind(std::string_view key) {
  const auto* it = std::find_if(kMemoryKinds.begin(), kMemoryKinds.end(),
                                [&](const MemoryKind& k) { return k.category == key; });
  if (key.empty() || it == kMemoryKinds.end()) return kMemoryKinds.back();
  return *it;
}

const MemoryKind& allocator_slack_kind() { return kMemoryKinds.back(); }

std::string_view part_name(Part part) { return part_kind(part).part; }
std::string_view part_label(Part part) { return part_kind(part).label; }

}  // namespace memest
