// A step compiled to polynomials and evaluated at a (micro-batch, sequence) point: the peak,
// its phase, what is live then, and the allocator's view (docs/design.md, "The step as data").
#include "base/emplace_fields.hpp"
#include "model/model_state.hpp"
#include "replay/allocator_step.hpp"
#include "step/step_build.hpp"

#include <memest/error.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <memory>
#include <optional>

namespace memest {
namespace {

using detail::build_step;

std::size_t idx(Part p) { return static_cast<std::size_t>(p); }

// One entry's bytes as a polynomial: count copies, one rank's share when sharded (only model
// states are sharded, and their sizes do not depend on b or s).
Poly entry_bytes(const Poly& t, const Entry& e) {
  Poly p;
  if (e.ranks > 1 && t.constant()) {
    p.c[0] = shard(checked_mul(t.c[0], e.count), e.ranks);
  } else {
    p.add(t, e.count);
  }
  return p;
}

// Adds an entry to a part: one multiply-add for a single-monomial tensor.
void add_entry(Poly& part, const Tensor& t, const Entry& e) {
  if (e.ranks > 1) {
    part.add(entry_bytes(t.bytes, e));
  } else if (t.mono >= 0) {
    const auto mi = static_cast<std::size_t>(t.mono);
    part.c[mi] = checked_add(part.c[mi], checked_mul(t.bytes.c[mi], e.count));
  } else {
    part.add(t.bytes, e.count);
  }
}

struct Compiled {
  MomentId id;
  Poly total;
  std::array<Poly, kPartCount> parts{};
  std::int32_t layer = -1;
};

// The phases from the optimizer's on: the first step has created its optimizer states.
bool states_exist(Phase phase) {
  return phase == Phase::optimizer || phase == Phase::master_copy || phase == Phase::zero_grad;
}

std::vector<Compiled> compile(const Step& step, const std::vector<MomentSpec>& walk,
                              bool batch_one) {
  std::vector<Compiled> out;
  out.reserve(walk.size());
  for (const MomentSpec& m : walk) {
    Compiled c{m.id, {}, {}, m.layer};
    for (std::uint32_t i = m.begin; i < m.end; ++i) {
      const Entry& e = step.entries[i];
      const Tensor& t = step.tensors[e.tensor];
      if (t.exists(batch_one)) add_entry(c.parts[idx(t.part)], t, e);
    }
    for (const Poly& p : c.parts) c.total.add(p);
    out.push_back(c);
  }
  return out;
}

// Whether a's polynomial is at least b's everywhere (every coefficient is).
bool dominates(const Poly& a, const Poly& b) {
  for (std::size_t i = 0; i < kMonoCount; ++i) {
    if (a.c[i] < b.c[i]) return false;
  }
  return true;
}

// The moment totals that can be the maximum somewhere: a moment whose every coefficient is at
// most another's never wins.
std::vector<Poly> frontier(const std::vector<Compiled>& ms) {
  std::vector<Poly> out;
  for (std::size_t i = 0; i < ms.size(); ++i) {
    bool beaten = false;
    for (std::size_t j = 0; j < ms.size() && !beaten; ++j) {
      if (i == j || !dominates(ms[j].total, ms[i].total)) continue;
      beaten = ms[j].total.c != ms[i].total.c || j < i;
    }
    if (!beaten) out.push_back(ms[i].total);
  }
  return out;
}

// A moment of a walk, its parts still to be filled, added to `out`. Built where it lies: a
// record built on the stack and copied would read the stores just made, a stall each.
Moment& add_moment(std::vector<Moment>& out, MomentId id, std::int32_t layer) {
  Moment& m = out.emplace_back();
  m.name = moment_name(id);
  m.phase = phase_name(phase_of(id.kind));
  m.layer = layer;
  m.id = id;
  return m;
}

void sum_parts(Moment& m) {
  for (const u64 p : m.parts) m.bytes = checked_add(m.bytes, p);
}

// Each compiled moment at a point.
std::vector<Moment> evaluate(const std::vector<Compiled>& ms, const Basis& x) {
  std::vector<Moment> out;
  out.reserve(ms.size());
  for (const Compiled& c : ms) {
    Moment& m = add_moment(out, c.id, c.layer);
    for (std::size_t p = 0; p < kPartCount; ++p) m.parts[p] = c.parts[p].at(x);
    sum_parts(m);
  }
  return out;
}

// The first step's largest moment: the first of the largest.
struct FirstPeak {
  u64 bytes = 0;
  std::string_view phase, moment;
  MomentId id;
  bool found = false;

  void take(const Moment& m, u64 v) {
    if (found && v <= bytes) return;
    // Field by field: a whole-record copy would read the id's two bytes just stored.
    bytes = v;
    phase = m.phase;
    moment = m.name;
    id = m.id;
    found = true;
  }
};

// Each moment of a walk at the point `bytes` was taken at, straight from its entries: what one
// estimate needs, without compiling the moments first. With `first`, also the first step's
// largest moment from these steady ones (alternatives not reduced): each moment less its
// optimizer states before the optimizer creates them, in its optimizer phase. The states are the
// step's one tensor of their part (Step::states_tensor), so the moment's part is theirs.
std::vector<Moment> moments_at(const Step& step, const std::vector<MomentSpec>& walk,
                               const detail::TensorBytes& bytes, FirstPeak* first = nullptr) {
  std::vector<Moment> out;
  out.reserve(walk.size());
  for (const MomentSpec& spec : walk) {
    Moment& m = add_moment(out, spec.id, spec.layer);
    // The even entries summed into the moment's parts and the odd ones apart, then added: an
    // entry's sum need not wait for the previous entry's store to the same part.
    std::array<u64, kPartCount> odd{};
    const Entry* e = step.entries.data() + spec.begin;
    const Entry* const end = step.entries.data() + spec.end;
    for (; end - e >= 2; e += 2) {
      bytes.add_entry(e[0], m.parts);
      bytes.add_entry(e[1], odd);
    }
    if (e != end) bytes.add_entry(*e, m.parts);
    for (std::size_t p = 0; p < kPartCount; ++p) m.parts[p] = checked_add(m.parts[p], odd[p]);
    sum_parts(m);
    if (!first) continue;
    const u64 states = m.parts[static_cast<std::size_t>(Part::optimizer_state)];
    first->take(m, states_exist(phase_of(m.id.kind)) ? m.bytes : m.bytes - states);
  }
  return out;
}

// The largest of a walk's moments (the first step's own walk).
FirstPeak largest(const std::vector<Moment>& walk) {
  FirstPeak out;
  for (const Moment& m : walk) out.take(m, m.bytes);
  return out;
}

// Alternatives of one moment (the same name, at the same layer) count as the largest of them:
// `all` keeps the first largest of each run, in place.
void reduce_alternatives(std::vector<Moment>& all) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Moment& m = all[i];
    if (n > 0 && all[n - 1].id == m.id && all[n - 1].layer == m.layer) {
      if (m.bytes > all[n - 1].bytes) all[n - 1] = m;
      continue;
    }
    if (n != i) all[n] = m;
    ++n;
  }
  all.resize(n);
}

// The index of the first largest moment: after reduce_alternatives, the moment that wins
// (Peak::winner, the first largest) is this one, kept for its run of alternatives.
std::size_t first_largest(const std::vector<Moment>& all) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < all.size(); ++i) {
    if (all[i].bytes > all[best].bytes) best = i;
  }
  return best;
}

std::vector<LiveTensor> live_at(const Step& step, const MomentSpec& m, const Basis& x,
                                const detail::TensorBytes& bytes) {
  std::vector<LiveTensor> out;
  out.reserve(m.end - m.begin);
  for (std::uint32_t i = m.begin; i < m.end; ++i) {
    const Entry& e = step.entries[i];
    const Tensor& t = step.tensors[e.tensor];
    if (!t.exists_at(x)) continue;
    const u64 each = bytes[e.tensor];
    const u64 all =
        e.ranks > 1 ? shard(checked_mul(each, e.count), e.ranks) : checked_mul(each, e.count);
    if (all == 0) continue;
    detail::emplace_fields(out, t.name, t.part, e.count, each, all, t.width, t.shape, e.ranks);
  }
  return out;
}

void by_phase(Peak& pk) {
  std::array<Phase, kPhaseCount> phases{};  // the phase of each entry of pk.by_phase
  for (std::size_t i = 0; i < pk.moments.size(); ++i) {
    const auto& m = pk.moments[i];
    if (m.bytes > pk.moments[pk.winner].bytes) pk.winner = i;
    const Phase phase = phase_of(m.id.kind);
    const auto seen = phases.begin() + static_cast<std::ptrdiff_t>(pk.by_phase.size());
    const auto it = std::find(phases.begin(), seen, phase);
    if (it == seen) {
      *it = phase;
      pk.by_phase.push_back({m.phase, m.bytes, m.name});
      continue;
    }
    PhasePeak& ph = pk.by_phase[static_cast<std::size_t>(it - phases.begin())];
    if (m.bytes > ph.bytes) {
      ph.bytes = m.bytes;
      ph.moment = m.name;
    }
  }
}

// --allocator cuda: the caching allocator replayed over model loading and two steps; what a
// device must hold is then the reserved bytes (docs/activations.md, "Allocator and context").
void replay_into(const RunSpec& run, const Step& step, u64 L, const Basis& x, Peak& pk) {
  const AllocatorReplay r = detail::replay_allocator(run, step, L, x);
  pk.allocated_bytes = r.allocated;
  pk.reserved_bytes = r.reserved;
  pk.allocator = r;
  if (pk.context_reserve) pk.nvidia_smi_bytes = checked_add(r.reserved, pk.context_reserve);
}

// The peak of a walk's moments (`steady`, alternatives not reduced: reduced here) at the point
// `bytes` was taken at; the first step's largest moment from `first` when given.
Peak peak_at(const RunSpec& run, const Step& step, std::vector<Moment> steady,
             const FirstPeak* first, const detail::TensorBytes& bytes, const Basis& x, u64 L) {
  Peak pk;
  pk.by_phase.reserve(kPhaseCount);
  const std::size_t live = first_largest(steady);  // the walk's moment the winner is
  reduce_alternatives(steady);
  pk.moments = std::move(steady);
  by_phase(pk);
  pk.bytes = pk.peak_moment().bytes;
  pk.phase = pk.peak_moment().phase;
  pk.live = live_at(step, step.steady[live], x, bytes);
  for (const auto& m : pk.moments) {
    if (m.id.kind == MomentKind::backward_start)
      pk.saved_weight_copies = m.parts[idx(Part::param_casts)];
  }
  pk.first_step_bytes = pk.bytes;
  pk.first_step_phase = pk.phase;
  pk.first_step_moment = pk.peak_moment().name;
  pk.first_step_id = pk.peak_moment().id;
  if (first && first->found) {
    pk.first_step_bytes = first->bytes;
    pk.first_step_phase = first->phase;
    pk.first_step_moment = first->moment;
    pk.first_step_id = first->id;
  }
  pk.context_reserve = run.training.context_reserve;
  u64 device = pk.bytes;
  if (run.training.allocator == Allocator::cuda) {
    replay_into(run, step, L, x, pk);
    device = *pk.reserved_bytes;
  }
  pk.needed = checked_add(device, pk.context_reserve);
  return pk;
}

}  // namespace

StepEstimate estimate_step(const RunSpec& run, const ActivationInputs& in,
                           const StepOptions& options) {
  // One step per thread, rebuilt whole by every call: its vectors' storage is allocated once
  // (docs/performance.md, "Wall time"); nothing read from it outlives this call.
  thread_local Step scratch;
  detail::build_step_into(scratch, run, in,
                          {.first_step = options.first_step, .timeline = options.timeline});
  const Step& step = scratch;
  const Basis x = basis_at(in.b, in.s, token_split(in));
  const detail::TensorBytes bytes(step, x);
  // The first step from the steady one needs each steady moment's optimizer states.
  const bool from_steady = options.first_step && step.first.empty();
  FirstPeak first;
  std::vector<Moment> steady = moments_at(step, step.steady, bytes, from_steady ? &first : nullptr);
  if (options.first_step && !from_steady) first = largest(moments_at(step, step.first, bytes));
  StepEstimate r;
  r.activations = detail::saved_bytes(step, in, x, bytes,
                                      options.with_terms ? Terms::listed : Terms::sums_only);
  r.peak =
      peak_at(run, step, std::move(steady), options.first_step ? &first : nullptr, bytes, x, in.L);
  if (options.timeline) {
    Peak& pk = r.peak;
    pk.timeline = moments_at(step, step.timeline, bytes);
    reduce_alternatives(pk.timeline);
    for (std::size_t i = 0; i < pk.timeline.size(); ++i) {
      if (pk.timeline[i].bytes > pk.timeline[pk.timeline_peak].bytes) pk.timeline_peak = i;
    }
  }
  return r;
}

ActivationBytes activation_bytes(const ActivationInputs& in, Terms terms) {
  Step step;
  detail::add_saved_tensors(step, in);
  const Basis x = basis_at(in.b, in.s, token_split(in));
  return detail::saved_bytes(step, in, x, detail::TensorBytes(step, x), terms);
}

// Per batch regime (batch 1, or more): the compiled moments, and the frontier of moment
// totals that needed() maximises over.
struct Regime {
  std::vector<Compiled> steady;
  std::vector<Poly> frontier;
};

// The run and its walked step are kept for the allocator's view; a plan for another
// optimizer shares them unless that view needs its own.
struct PeakPlan::Impl {
  std::shared_ptr<const RunSpec> run;
  std::shared_ptr<const ActivationInputs> in;
  std::shared_ptr<const Step> step;
  /// Where the optimizer's tensors are entered: (moment, entry) pairs of the steady walk.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> optimizer_entries;
  std::array<Regime, 2> regimes;  // [0] batch > 1, [1] batch 1
  bool allocator = false;
  u64 context_reserve = 0;
};

PeakPlan::PeakPlan(const RunSpec& run, const ActivationInputs& in) : impl_(new Impl) {
  impl_->run = std::make_shared<const RunSpec>(run);
  impl_->in = std::make_shared<const ActivationInputs>(in);
  impl_->allocator = run.training.allocator == Allocator::cuda;
  impl_->context_reserve = run.training.context_reserve;
  // The allocator's replay runs the first step's walk as well.
  impl_->step = std::make_shared<const Step>(build_step(run, in, {.first_step = impl_->allocator}));
  const Step& step = *impl_->step;
  for (std::uint32_t k = 0; k < step.steady.size(); ++k) {
    for (std::uint32_t i = step.steady[k].begin; i < step.steady[k].end; ++i) {
      const std::uint32_t t = step.entries[i].tensor;
      const bool temps = std::find(step.step_temporaries.begin(), step.step_temporaries.end(), t) !=
                         step.step_temporaries.end();
      if (t == step.states_tensor || temps) impl_->optimizer_entries.emplace_back(k, i);
    }
  }
  for (std::size_t one = 0; one < 2; ++one) {
    Regime& r = impl_->regimes[one];
    r.steady = compile(*impl_->step, impl_->step->steady, one == 1);
    r.frontier = frontier(r.steady);
  }
}

// The optimizer is two tensors of the step (its states, its step's temporaries): a new one
// resizes them and patches each moment by the difference.
PeakPlan PeakPlan::with_optimizer(const OptimizerSpec& optimizer) const {
  PeakPlan out;
  out.impl_ = std::make_unique<Impl>(*impl_);
  Impl& m = *out.impl_;
  const auto sizes =
      detail::optimizer_sizes(*m.run, optimizer, detail::parameter_sums(*m.run, *m.in), m.in->cuda);
  const Step& step = *m.step;
  const u64 states = checked_add(sizes.state_bytes, sizes.step_counter_bytes);
  for (std::size_t one = 0; one < 2; ++one) {
    Regime& r = m.regimes[one];
    for (const auto& [k, i] : m.optimizer_entries) {
      const Entry& e = step.entries[i];
      const Tensor& t = step.tensors[e.tensor];
      Poly now;
      now.c[0] = e.tensor == step.states_tensor ? states : sizes.temporaries;
      Poly& part = r.steady[k].parts[idx(t.part)];
      part.subtract(entry_bytes(t.bytes, e));
      part.add(entry_bytes(now, e));
    }
    for (Compiled& c : r.steady) {
      c.total = Poly{};
      for (const Poly& p : c.parts) c.total.add(p);
    }
    r.frontier = frontier(r.steady);
  }
  if (m.allocator) {  // the allocator's view reads the run and the step's optimizer tensors
    auto run = std::make_shared<RunSpec>(*m.run);
    run->optimizer = optimizer;
    m.run = std::move(run);
    auto copy = std::make_shared<Step>(step);
    detail::resize_optimizer(*copy, sizes);
    m.step = std::move(copy);
  }
  return out;
}

PeakPlan::PeakPlan() = default;
PeakPlan::~PeakPlan() = default;
PeakPlan::PeakPlan(PeakPlan&&) noexcept = default;
PeakPlan& PeakPlan::operator=(PeakPlan&&) noexcept = default;

std::uint64_t PeakPlan::needed(std::uint64_t micro_batch, std::uint64_t seq_len) const {
  const Regime& r = impl_->regimes[micro_batch == 1 ? 1 : 0];
  const ActivationInputs& in = *impl_->in;
  const Basis x = basis_at(micro_batch, ceil_div(seq_len, in.cp), token_split(in));
  if (impl_->allocator) {
    RunSpec run = *impl_->run;
    run.training.micro_batch = micro_batch;
    run.training.seq_len = seq_len;
    const Step& step = *impl_->step;
    return peak_at(run, step, evaluate(r.steady, x), nullptr, detail::TensorBytes(step, x), x, in.L)
        .needed;
  }
  u64 peak = 0;
  for (const Poly& p : r.frontier) peak = std::max(peak, p.at(x));
  return checked_add(peak, impl_->context_reserve);
}

namespace detail {

TensorBytes::TensorBytes(const Step& step, const Basis& x) {
  const std::size_t n = step.tensors.size();
  Value* out = inline_.data();
  if (n > kInline) {
    heap_.resize(n);
    out = heap_.data();
  }
  values_ = out;
  for (const Tensor& t : step.tensors) *out++ = value_at(t, x);
}

// Poly::at without throwing: a tensor of one monomial is one multiplication.
TensorBytes::Value TensorBytes::value_at(const Tensor& t, const Basis& x) {
  const auto term = [&](std::size_t i, u64& sum) {
    const u64 c = t.bytes.c[i];
    u64 m = 0;
    return !__builtin_mul_overflow(c, x[i], &m) && !__builtin_add_overflow(sum, m, &sum) &&
           (x[i] != kBeyond || c == 0);
  };
  Value v{0, true, t.exists_at(x), true, t.part};
  if (!v.exists) return v;  // 0 bytes, never throws
  if (t.mono >= 0) {
    v.constant = t.mono == 0;
    v.fits = term(static_cast<std::size_t>(t.mono), v.bytes);
  } else {
    v.constant = t.bytes.constant();
    for (std::size_t i = 0; i < kMonoCount && v.fits; ++i) {
      if (t.bytes.c[i] != 0) v.fits = term(i, v.bytes);  // a zero term adds nothing
    }
  }
  return v;
}

}  // namespace detail
}  // namespace memest
