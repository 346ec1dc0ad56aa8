// The events of a step replayed through the caching allocator (src/replay/allocator_step.cpp):
// hand-made steps whose reserved and allocated bytes follow from the order of the events.
#include "replay/allocator_step.hpp"

#include "step/step_build.hpp"
#include "testutil.hpp"

#include <memest/run_spec.hpp>

#include <catch2/catch.hpp>

#include <initializer_list>
#include <utility>

using namespace memest;

namespace {

using memest::test::MiB;

// A run whose replay allocates nothing but the step's tensors (no cuBLAS or TE workspace).
RunSpec bare_run() {
  RunSpec r;
  r.training.cublas_workspace = 0;
  r.training.te_workspace = 0;
  return r;
}

std::uint32_t tensor(Step& s, std::string_view name, std::uint64_t bytes,
                     Scope scope = Scope::transient) {
  return detail::add_tensor(s, name, scope == Scope::transient ? Part::other : Part::activations,
                            scope, Slot::none, bytes, shape({}));
}

// A moment of the steady walk holding (tensor, count) entries.
void moment(Step& s, MomentKind kind,
            std::initializer_list<std::pair<std::uint32_t, std::uint64_t>> entries) {
  MomentSpec m{{kind, LayerAt::none}, static_cast<std::uint32_t>(s.entries.size()), 0, -1};
  for (const auto& [t, n] : entries) s.entries.push_back({t, 1, n});
  m.end = static_cast<std::uint32_t>(s.entries.size());
  s.steady.push_back(m);
}

// A step with no optimizer states (the first step leaves them out before its optimizer phase).
Step empty_step() {
  Step s;
  s.states_tensor = detail::add_tensor(s, "optimizer states", Part::optimizer_state, Scope::state,
                                       Slot::none, 0, shape({}));
  return s;
}

AllocatorReplay replay(const Step& s) {
  return detail::replay_allocator(bare_run(), s, 1, basis_at(1, 1));
}

}  // namespace

TEST_CASE("the replay runs the moments in time order, not in the walk's listing", "[allocator]") {
  // The walk lists forward_end (3 MiB) before the last layer's attention (12 MiB), which
  // happens first. In time order the 12 MiB block gets a segment of its own and the 3 MiB one
  // splits it once it is free: 12 MiB reserved. In the listing's order the 3 MiB block would
  // take a 20 MiB segment that the 12 MiB one then splits: 20 MiB.
  Step s = empty_step();
  const std::uint32_t scores = tensor(s, "scores", 12 * MiB);
  const std::uint32_t logits = tensor(s, "logits", 3 * MiB);
  moment(s, MomentKind::forward_end, {{logits, 1}});
  moment(s, MomentKind::forward_attention, {{scores, 1}});
  const AllocatorReplay r = replay(s);
  CHECK(r.reserved == 12 * MiB);
  CHECK(r.segments == 1);
  CHECK(r.allocated == 12 * MiB);
  CHECK(r.allocated_at.stretch == "first step");
  CHECK(r.allocated_at.moment == "forward_attention");
}

TEST_CASE("between two moments the frees come before the allocations", "[allocator]") {
  // forward_end holds a (3 MiB) and c (5 MiB), backward_start a and b (5 MiB). a stays; c is
  // freed before b is allocated, so b takes c's place and no more than 8 MiB is ever live.
  Step s = empty_step();
  const std::uint32_t a = tensor(s, "a", 3 * MiB);
  const std::uint32_t b = tensor(s, "b", 5 * MiB);
  const std::uint32_t c = tensor(s, "c", 5 * MiB);
  moment(s, MomentKind::forward_end, {{a, 1}, {c, 1}});
  moment(s, MomentKind::backward_start, {{a, 1}, {b, 1}});
  const AllocatorReplay r = replay(s);
  CHECK(r.allocated == 8 * MiB);
  CHECK(r.reserved == 20 * MiB);  // one 20 MiB segment for requests under 10 MiB
  CHECK(r.segments == 1);
}

TEST_CASE("a moment reached over several layers is replayed layer by layer", "[allocator]") {
  // Three layers' copies of an 8 MiB saved tensor, and an 11 MiB temporary each layer's ops
  // make and free again (the last layer keeps it). Layer by layer: copy 0 takes a 20 MiB
  // segment and the temporary its remaining 12 MiB whole (the remainder is not more than 1 MiB,
  // so no split); copy 1 leaves 4 MiB there, so the temporary gets a 12 MiB segment; copy 2
  // splits that one, and the last temporary needs a third: 44 MiB in three segments. The
  // copies allocated at once and the temporary after them would need 40 MiB in two.
  Step s = empty_step();
  const std::uint32_t saved = tensor(s, "saved", 8 * MiB, Scope::layer);
  const std::uint32_t temp = tensor(s, "temporary", 11 * MiB);
  moment(s, MomentKind::forward_end, {{saved, 3}, {temp, 1}});
  const AllocatorReplay r = replay(s);
  CHECK(r.segments == 3);
  CHECK(r.reserved == 44 * MiB);
  CHECK(r.allocated == 3 * 8 * MiB + 12 * MiB);  // the temporary's unsplit block counts whole
}
