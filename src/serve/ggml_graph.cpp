// The order, the split copies and the allocator's replay of a ggml graph
// (src/serve/ggml_graph.hpp).
#include "serve/ggml_graph.hpp"

#include "serve/ggml_alloc.hpp"

#include <memest/units.hpp>

#include <algorithm>
#include <utility>

namespace memest {

std::uint64_t ggml_bytes(std::initializer_list<std::uint64_t> sizes) {
  std::uint64_t p = 1;
  for (const std::uint64_t x : sizes) p = checked_mul(p, x);
  return p;
}

GgmlGraph::Id GgmlGraph::add(Tensor t, std::initializer_list<Id> srcs) {
  const auto id = static_cast<Id>(tensors_.size());
  if (!t.view) t.root = id;
  t.first_src = static_cast<std::uint32_t>(srcs_.size());
  t.srcs = static_cast<std::uint32_t>(srcs.size());
  srcs_.insert(srcs_.end(), srcs);
  tensors_.push_back(t);
  visited_.push_back(false);
  return id;
}

GgmlGraph::Id GgmlGraph::external() { return add({.external = true, .leaf = true}); }

GgmlGraph::Id GgmlGraph::weight(int device, std::uint64_t bytes) {
  return add({.bytes = bytes, .device = device, .external = true, .leaf = true, .weight = true});
}

GgmlGraph::Id GgmlGraph::input(std::uint64_t bytes) {
  return add({.bytes = bytes, .device = -1, .leaf = true});
}

GgmlGraph::Id GgmlGraph::op(int device, std::uint64_t bytes, std::initializer_list<Id> srcs,
                            Reuse reuse) {
  return add({.bytes = bytes, .device = device, .in_place = reuse == Reuse::in_place}, srcs);
}

GgmlGraph::Id GgmlGraph::view(Id of, std::uint64_t bytes) {
  const Id root = tensors_[of].root;
  return add({.bytes = bytes, .root = root, .external = tensors_[root].external, .view = true},
             {of});
}

GgmlGraph::Id GgmlGraph::write(Id src, Id dest) {
  const Id root = tensors_[dest].root;
  return add({.root = root, .external = tensors_[root].external, .view = true}, {src, dest});
}

void GgmlGraph::output(Id t) { tensors_[tensors_[t].root].output = true; }

// ggml_visit_parents without recursion: a tensor is placed once all its sources are.
void GgmlGraph::expand(Id t) {
  std::vector<std::pair<Id, std::uint32_t>> stack{{t, 0}};
  while (!stack.empty()) {
    auto& [id, next] = stack.back();
    if (next == 0 && visited_[id]) {
      stack.pop_back();
      continue;
    }
    visited_[id] = true;
    const Tensor& x = tensors_[id];
    if (next < x.srcs) {
      const Id src = srcs_[x.first_src + next++];
      if (!visited_[src]) stack.emplace_back(src, 0);
      continue;
    }
    if (!x.leaf) order_.push_back(id);
    stack.pop_back();
  }
}

namespace {

// A tensor of the replay: the graph's, or a copy the scheduler adds.
struct ReplayTensor {
  std::uint64_t bytes = 0;
  std::uint32_t root = 0;
  int device = 0;
  bool external = false, view = false, dep = false, in_place = false, output = false;
};

// A node as it runs: its tensor and the tensors it reads (after the split copies), srcs of them
// from first_src in the plan's list.
struct ReplayNode {
  std::uint32_t tensor, first_src, srcs;
};

// One device's high-water mark over the plan (ggml_gallocr_alloc_graph_impl).
class Replay {
 public:
  struct Plan {
    const std::vector<ReplayTensor>& slots;
    const std::vector<ReplayNode>& steps;
    const std::vector<std::uint32_t>& srcs;
  };
  Replay(Plan p, int device, std::uint64_t alignment)
      : p_(p),
        device_(device),
        alloc_(alignment),
        children_(p.slots.size()),
        views_(p.slots.size()),
        offset_(p.slots.size()),
        allocated_(p.slots.size()) {
    for (const auto& s : p.steps) {
      if (p.slots[s.tensor].view) ++views_[p.slots[s.tensor].root];
      for (std::uint32_t i = 0; i < s.srcs; ++i) ++children_[p.srcs[s.first_src + i]];
    }
  }
  std::uint64_t run() {
    for (const auto& s : p_.steps) {
      const auto* srcs = p_.srcs.data() + s.first_src;
      allocate(s.tensor, srcs, s.srcs);
      for (std::uint32_t i = 0; i < s.srcs; ++i) release_parent(srcs[i]);
    }
    return alloc_.max_size();
  }

 private:
  bool own(std::uint32_t t) const {
    const ReplayTensor& s = p_.slots[t];
    return !s.external && p_.slots[s.root].device == device_;
  }
  // ggml_gallocr_allocate_node: in the bytes of a source it may take (reuse), else a new block.
  void allocate(std::uint32_t t, const std::uint32_t* srcs, std::uint32_t n) {
    const ReplayTensor& s = p_.slots[t];
    if (s.view || s.dep || !own(t) || allocated_[t]) return;
    allocated_[t] = true;
    if (s.in_place) {
      for (std::uint32_t i = 0; i < n; ++i) {
        if (reuse(t, srcs[i])) return;
      }
    }
    offset_[t] = alloc_.alloc(s.bytes);
  }
  // A source this buffer allocated (a view never is: ggml_gallocr_is_own), of as many bytes,
  // not an output, whose only reader is `t` and that has no view.
  bool reuse(std::uint32_t t, std::uint32_t src) {
    const ReplayTensor& x = p_.slots[src];
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
    const ReplayTensor& x = p_.slots[src];
    if (!x.view) return release(src);
    if (--views_[x.root] == 0 && children_[x.root] == 0) release(x.root);
  }
  Plan p_;
  int device_;
  GgmlDynAllocator alloc_;
  std::vector<std::uint32_t> children_, views_;
  std::vector<std::uint64_t> offset_;
  std::vector<bool> allocated_;
};

// ggml_backend_sched_split_graph's copies of the tensors a split reads from other devices: one
// per tensor and device, made at the start of the first split that needs it, after a dependency
// (input_dep) that keeps the source until then. Under pipeline parallelism (n_copies > 1) each
// is made n_copies times, as graph inputs and outputs: allocated before any node (the scheduler
// adds them as leafs) and never freed.
struct SplitCopies {
  std::uint64_t n_copies;
  std::vector<std::vector<std::pair<int, std::uint32_t>>> made;  // by source: (device, copy)
  std::vector<ReplayNode> front;                                 // the kept copies' steps
  struct Into {
    std::vector<ReplayTensor>& slots;
    std::vector<ReplayNode>& steps;
    std::vector<std::uint32_t>& srcs;
  };
  // The copy on `dev` of `src` (`bytes`, on device `from`), made if not yet.
  std::uint32_t copy(Into p, std::uint32_t src, std::uint64_t bytes, int from, int dev) {
    for (const auto& [d, id] : made[src]) {
      if (d == dev) return id;
    }
    const auto id = static_cast<std::uint32_t>(p.slots.size());
    const bool kept = n_copies > 1;
    p.slots.push_back({.bytes = bytes, .root = id, .device = dev, .output = kept});
    p.slots.push_back({.root = id + 1, .device = from, .dep = true});
    p.steps.push_back({id + 1, static_cast<std::uint32_t>(p.srcs.size()), 1});
    p.srcs.push_back(src);
    (kept ? front : p.steps).push_back({id, 0, 0});
    for (std::uint64_t c = 1; kept && c < n_copies; ++c) {
      const auto extra = static_cast<std::uint32_t>(p.slots.size());
      p.slots.push_back({.bytes = bytes, .root = extra, .device = dev, .output = true});
      front.push_back({extra, 0, 0});
    }
    made[src].emplace_back(dev, id);
    return id;
  }
};

}  // namespace

// A source a node on `dev` reads through a copy: another device's activation, or a weight in
// another device's buffer (never a view's source, which is the view's own).
bool GgmlGraph::foreign(Id src, int dev) const {
  const Tensor& s = tensors_[src];
  return (!s.external || s.weight) && device_of(src) != dev;
}

bool GgmlGraph::reads_foreign_weight(const Tensor& x, int dev) const {
  if (x.view) return false;
  for (std::uint32_t k = 0; k < x.srcs; ++k) {
    const Id src = srcs_[x.first_src + k];
    if (tensors_[src].weight && device_of(src) != dev) return true;
  }
  return false;
}

struct GgmlGraph::Plan {
  std::vector<ReplayTensor> slots;
  std::vector<ReplayNode> steps;
  std::vector<std::uint32_t> srcs;
};

GgmlGraph::Plan GgmlGraph::plan(std::uint64_t n_copies) const {
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
  // A split is a run of nodes on one device (views stay in the run they are in); a node
  // reading another device's tensor reads that device's copy (SplitCopies).
  SplitCopies copies{
      n_copies, std::vector<std::vector<std::pair<int, std::uint32_t>>>(tensors_.size()), {}};
  std::vector<ReplayNode> body;
  std::vector<std::uint32_t> body_srcs;
  std::size_t i = 0;
  while (i < order_.size()) {
    std::size_t first = i;  // the split's device is its first node's that is not a view
    while (first + 1 < order_.size() && tensors_[order_[first]].view) ++first;
    const int dev = device_of(order_[first]);
    body.clear();
    body_srcs.clear();
    const std::size_t slots_before = p.slots.size();  // a split with copies ends at a foreign
    for (; i < order_.size() && (tensors_[order_[i]].view || device_of(order_[i]) == dev); ++i) {
      const Tensor& x = tensors_[order_[i]];  // weight's reader
      if (p.slots.size() > slots_before && reads_foreign_weight(x, dev)) break;
      body.push_back({order_[i], static_cast<std::uint32_t>(body_srcs.size()), x.srcs});
      for (std::uint32_t k = 0; k < x.srcs; ++k) {
        const std::uint32_t src = srcs_[x.first_src + k];
        body_srcs.push_back(!x.view && foreign(src, dev)
                                ? copies.copy({p.slots, p.steps, p.srcs}, src, tensors_[src].bytes,
                                              device_of(src), dev)
                                : src);
      }
    }
    const auto base = static_cast<std::uint32_t>(p.srcs.size());
    p.srcs.insert(p.srcs.end(), body_srcs.begin(), body_srcs.end());
    for (ReplayNode s : body) {
      s.first_src += base;
      p.steps.push_back(s);
    }
  }
  p.steps.insert(p.steps.begin(), copies.front.begin(), copies.front.end());
  return p;
}

std::vector<std::uint64_t> GgmlGraph::buffers(std::size_t devices, std::uint64_t alignment,
                                              std::uint64_t n_copies) const {
  const Plan p = plan(n_copies);
  std::vector<std::uint64_t> out(devices);
  for (std::size_t d = 0; d < devices; ++d)
    out[d] = Replay({p.slots, p.steps, p.srcs}, static_cast<int>(d), alignment).run();
  return out;
}

}  // namespace memest
