// The order, the split copies and the allocator's replay of a ggml graph
// (src/serve/ggml_graph.hpp).
#include "serve/ggml_graph.hpp"

#include "serve/ggml_alloc.hpp"

#include <memest/units.hpp>

#include <algorithm>
#include <utility>

namespace memest {

GgmlGraph::Id GgmlGraph::add(Tensor t) {
  const auto id = static_cast<Id>(tensors_.size());
  if (!t.view) t.root = id;
  tensors_.push_back(std::move(t));
  visited_.push_back(false);
  return id;
}

GgmlGraph::Id GgmlGraph::external() { return add({.external = true, .leaf = true}); }

GgmlGraph::Id GgmlGraph::input(std::uint64_t bytes) {
  return add({.bytes = bytes, .device = -1, .leaf = true});
}

GgmlGraph::Id GgmlGraph::op(int device, std::uint64_t bytes, std::initializer_list<Id> srcs,
                            Reuse reuse) {
  return add(
      {.bytes = bytes, .srcs = srcs, .device = device, .in_place = reuse == Reuse::in_place});
}

GgmlGraph::Id GgmlGraph::view(Id of, std::uint64_t bytes) {
  const Tensor& o = tensors_[of];
  return add({.bytes = bytes,
              .srcs = {of},
              .root = o.root,
              .external = tensors_[o.root].external,
              .view = true});
}

GgmlGraph::Id GgmlGraph::write(Id src, Id dest) {
  const Id root = tensors_[dest].root;
  return add(
      {.srcs = {src, dest}, .root = root, .external = tensors_[root].external, .view = true});
}

void GgmlGraph::output(Id t) { tensors_[tensors_[t].root].output = true; }

// ggml_visit_parents without recursion: a tensor is placed once all its sources are.
void GgmlGraph::expand(Id t) {
  std::vector<std::pair<Id, std::size_t>> stack{{t, 0}};
  while (!stack.empty()) {
    auto& [id, next] = stack.back();
    if (next == 0 && visited_[id]) {
      stack.pop_back();
      continue;
    }
    visited_[id] = true;
    const Tensor& x = tensors_[id];
    if (next < x.srcs.size()) {
      const Id src = x.srcs[next++];
      if (!visited_[src]) stack.emplace_back(src, 0);
      continue;
    }
    if (!x.leaf) order_.push_back(id);
    stack.pop_back();
  }
}

namespace {

// A tensor of the replay: the graph's, or a copy the scheduler adds.
struct Slot {
  std::uint64_t bytes = 0;
  std::uint32_t root = 0;
  int device = 0;
  bool external = false, view = false, dep = false, in_place = false, output = false;
};

struct Plan {
  std::vector<Slot> slots;
  struct Step {
    std::uint32_t tensor;
    std::vector<std::uint32_t> srcs;
  };
  std::vector<Step> steps;
};

// One device's high-water mark over the plan (ggml_gallocr_alloc_graph_impl).
class Replay {
 public:
  Replay(const Plan& p, int device, std::uint64_t alignment)
      : p_(p),
        device_(device),
        alloc_(alignment),
        children_(p.slots.size()),
        views_(p.slots.size()),
        offset_(p.slots.size()),
        allocated_(p.slots.size()) {
    for (const auto& s : p.steps) {
      if (p.slots[s.tensor].view) ++views_[p.slots[s.tensor].root];
      for (const auto src : s.srcs) ++children_[src];
    }
  }
  std::uint64_t run() {
    for (const auto& s : p_.steps) {
      allocate(s.tensor, s.srcs);
      for (const auto src : s.srcs) release_parent(src);
    }
    return alloc_.max_size();
  }

 private:
  bool own(std::uint32_t t) const {
    const Slot& s = p_.slots[t];
    return !s.external && p_.slots[s.root].device == device_;
  }
  // ggml_gallocr_allocate_node: in the bytes of a source it may take (reuse), else a new block.
  void allocate(std::uint32_t t, const std::vector<std::uint32_t>& srcs) {
    const Slot& s = p_.slots[t];
    if (s.view || s.dep || !own(t) || allocated_[t]) return;
    allocated_[t] = true;
    if (s.in_place) {
      for (const auto src : srcs) {
        if (reuse(t, src)) return;
      }
    }
    offset_[t] = alloc_.alloc(s.bytes);
  }
  // A source this buffer allocated (a view never is: ggml_gallocr_is_own), of as many bytes,
  // not an output, whose only reader is `t` and that has no view.
  bool reuse(std::uint32_t t, std::uint32_t src) {
    const Slot& x = p_.slots[src];
    if (x.view || !own(src) || !allocated_[src] || x.output || x.bytes != p_.slots[t].bytes)
      return false;
    if (children_[src] != 1 || views_[src] != 0) return false;
    offset_[t] = offset_[src];
    allocated_[src] = false;
    return true;
  }
  void release(std::uint32_t t) {
    if (p_.slots[t].output || !own(t) || !allocated_[t]) return;
    alloc_.free(offset_[t], p_.slots[t].bytes);
    allocated_[t] = false;
  }
  void release_parent(std::uint32_t src) {
    if (--children_[src] != 0 || views_[src] != 0) return;
    const Slot& x = p_.slots[src];
    if (!x.view) return release(src);
    if (--views_[x.root] == 0 && children_[x.root] == 0) release(x.root);
  }
  const Plan& p_;
  int device_;
  GgmlDynAllocator alloc_;
  std::vector<std::uint32_t> children_, views_;
  std::vector<std::uint64_t> offset_;
  std::vector<bool> allocated_;
};

}  // namespace

std::uint64_t GgmlGraph::buffer_bytes(int device, std::uint64_t alignment) const {
  Plan p;
  p.slots.reserve(tensors_.size());
  for (const Tensor& t : tensors_) {
    p.slots.push_back({.bytes = t.bytes,
                       .root = t.root,
                       .device = t.device,
                       .external = t.external,
                       .view = t.view,
                       .in_place = t.in_place,
                       .output = t.output});
  }
  // ggml_backend_sched_split_graph: a split is a run of nodes on one device (views stay in the
  // run they are in); a node reading another device's tensor reads that device's copy, one per
  // tensor and device, made at the start of the first split that needs it, after a dependency
  // (input_dep) that keeps the source until then.
  std::vector<std::vector<std::pair<int, std::uint32_t>>> copies(tensors_.size());
  std::size_t i = 0;
  while (i < order_.size()) {
    std::size_t first = i;  // the split's device is its first node's that is not a view
    while (first + 1 < order_.size() && tensors_[order_[first]].view) ++first;
    const int dev = device_of(order_[first]);
    std::size_t end = i;
    std::vector<Plan::Step> body;
    std::vector<Plan::Step> inputs;
    while (end < order_.size() && (tensors_[order_[end]].view || device_of(order_[end]) == dev)) {
      const Tensor& x = tensors_[order_[end]];
      Plan::Step s{order_[end], x.srcs};
      for (auto& src : s.srcs) {
        if (x.view || tensors_[src].external || device_of(src) == dev) continue;
        auto& made = copies[src];
        auto it =
            std::find_if(made.begin(), made.end(), [&](const auto& c) { return c.first == dev; });
        if (it == made.end()) {
          const auto id = static_cast<std::uint32_t>(p.slots.size());
          p.slots.push_back({.bytes = tensors_[src].bytes, .root = id, .device = dev});
          const auto dep = static_cast<std::uint32_t>(p.slots.size());
          p.slots.push_back({.root = dep, .device = device_of(src), .dep = true});
          inputs.push_back({dep, {src}});
          inputs.push_back({id, {}});
          made.emplace_back(dev, id);
          it = made.end() - 1;
        }
        src = it->second;
      }
      body.push_back(std::move(s));
      ++end;
    }
    for (auto& s : inputs) p.steps.push_back(std::move(s));
    for (auto& s : body) p.steps.push_back(std::move(s));
    i = end;
  }
  return Replay(p, device, alignment).run();
}

}  // namespace memest
