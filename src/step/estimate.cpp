#include "base/compiled_format.hpp"
#include "parallel/fsdp.hpp"
#include "parallel/layout.hpp"
#include "step/rules/rules.hpp"

#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <span>
#include <stdexcept>

namespace memest {
namespace {

// "4 B x 6,738,415,616 trainable params": three pieces and two separators appended into one
// string of the right size (what fmt::format("{} B x {} {}") gives, without a buffer to copy).
std::string basis(Dtype d, std::uint64_t elements, std::string_view what) {
  const std::string_view per = bytes_per_element_text(d);
  const std::string count = format_count(elements);
  std::string out;
  out.reserve(per.size() + 5 + count.size() + 1 + what.size());
  out.append(per).append(" B x ").append(count).append(" ").append(what);
  return out;
}

// A row named in the words of the one table of kinds (src/step/memory_kinds.cpp).
Category kind_row(std::string_view key, std::optional<Dtype> dtype, std::uint64_t elements,
                  std::optional<std::uint64_t> bytes) {
  return Category{key, category_kind(key).label, dtype, elements, bytes, {}};
}

Category dtype_category(std::string_view key, std::optional<Dtype> dtype, std::uint64_t elements,
                        std::string_view what) {
  Category c = kind_row(key, dtype, elements, 0);
  if (dtype && elements > 0) {
    c.bytes = bytes_for(*dtype, elements);
    c.basis = basis(*dtype, elements, what);
  } else if (dtype) {
    c.basis = fmt::format("no {}", what);
  } else {
    c.basis = "not used by this policy";
  }
  if (!dtype) c.elements = 0;
  return c;
}

// Parameters in the policy's dtype, except groups stored otherwise (QLoRA's nf4 base and its
// quantization constants), which the basis lists apart.
Category params_category(const Inventory& inv, Dtype dtype, std::uint64_t params) {
  Category c = dtype_category("params", dtype, params, "params");
  // Sum elements per (stored dtype, quantization constant or not), in first-seen order.
  struct Part {
    Dtype dtype;
    bool quant_state;
    std::uint64_t elements;
  };
  std::array<Part, 2 * (static_cast<std::size_t>(Dtype::nf4) + 1)> seen{};  // each pair once
  std::size_t n = 0;
  for (const auto& g : inv.groups) {
    const Dtype d = g.storage.value_or(dtype);
    const auto end = seen.begin() + static_cast<std::ptrdiff_t>(n);
    auto it = std::find_if(seen.begin(), end, [&](const Part& p) {
      return p.dtype == d && p.quant_state == g.quant_state;
    });
    if (it == end) {
      seen[n++] = {d, g.quant_state, g.elements()};
    } else {
      it->elements = checked_add(it->elements, g.elements());
    }
  }
  const std::span<const Part> parts(seen.data(), n);
  if (parts.size() <= 1) return c;
  c.bytes = parameter_bytes(inv, dtype);
  c.dtype.reset();
  std::vector<std::string> terms;
  terms.reserve(parts.size());
  for (const auto& p : parts) {
    terms.push_back(basis(
        p.dtype, p.elements,
        p.quant_state ? "quantization constants" : fmt::format("{} params", dtype_name(p.dtype))));
  }
  c.basis = fmt::format("{}", fmt::join(terms, " + "));
  return c;
}

Category optimizer_states(const OptimizerBytes& ob, std::uint64_t trainable, Dtype state_dtype) {
  // The states' own dtype where they share one (Adafactor's are fp32 under any policy).
  const Dtype own = ob.states.empty() ? state_dtype : ob.states.front().dtype;
  Category c = kind_row("optimizer_states", own, trainable, ob.state_bytes);
  if (ob.states.empty()) {
    c.basis = "no state";
    c.dtype.reset();
    return c;
  }
  // States of the same shape read better as one term: "exp_avg + exp_avg_sq: 2 x 4 B x N".
  bool same = true;
  for (const auto& s : ob.states) {
    same = same && s.formula == ob.states.front().formula;
    if (s.dtype != own) c.dtype.reset();  // mixed dtypes (adam8bit)
  }
  const bool one_term = same && ob.states.size() > 1;
  fmt::memory_buffer out;
  for (std::size_t i = 0; i < ob.states.size(); ++i) {
    const auto& s = ob.states[i];
    if (i > 0) out.append(std::string_view(" + "));
    if (one_term) {
      out.append(std::string_view(s.name));
    } else {
      fmt::format_to(fmt::appender(out), FMT_COMPILE("{} ({})"), s.name, s.formula);
    }
  }
  if (one_term) {
    fmt::format_to(fmt::appender(out), FMT_COMPILE(": {} x {}"), ob.states.size(),
                   ob.states.front().formula);
  }
  c.basis = fmt::to_string(out);
  return c;
}

Category step_counters(const OptimizerBytes& ob, const OptimizerSpec& spec,
                       std::optional<std::uint64_t> tensors) {
  Category c = kind_row("optimizer_step", Dtype::fp32, 0, ob.step_bytes);
  c.on_device = spec.impl == OptimizerImpl::fused;
  c.per_param = false;
  if (!ob.step_counted) {
    c.bytes.reset();
    c.dtype = Dtype::fp32;
    c.basis = "4 B per parameter tensor; tensor count unknown for a bare --params count";
  } else if (ob.step_bytes == 0) {
    c.dtype.reset();
    c.basis = "none for this optimizer";
  } else {
    c.elements = tensors.value_or(0);
    c.basis = detail::compiled_format(FMT_COMPILE("4 B x {} trainable tensors, in {} memory"),
                                      ob.step_bytes / 4, c.on_device ? "device" : "host");
  }
  return c;
}

// FSDP: a rank's shard of a row, with the padding of the flat (FSDP1) or dim-0 (FSDP2)
// parameters (src/parallel/fsdp.cpp): the parameters' bytes, and per trainable element for the
// rest.
std::uint64_t fsdp_share(const Category& c, const FsdpShards& fs, std::uint64_t trainable) {
  if (c.key == "params") return fs.param_bytes;
  const bool grads = c.key == "grads" || c.key == "grad_accum";
  if (c.elements == trainable && *c.bytes % trainable == 0)
    return checked_mul(*c.bytes / trainable, grads ? fs.grads : fs.trainable);
  return *c.bytes;  // not elementwise (factored states): sharded evenly below
}

// FSDP's no_sync() over an accumulation: every unit's whole flat gradient, unreduced.
void whole_flat_grads(Category& c, const FsdpShards& fs, std::uint64_t trainable,
                      std::uint64_t ranks) {
  c.bytes = checked_mul(fsdp_share(c, fs, trainable), ranks);
  c.elements = checked_mul(fs.grads, ranks);
  c.basis +=
      ", whole on every rank: FSDP's no_sync() keeps each unit's flat gradient through "
      "the accumulation";
}

// ZeRO: each rank keeps 1/N of the sharded model states (Rajbhandari et al. 2020, sec. 5).
void shard_categories(std::vector<Category>& cats, const RunSpec& run) {
  const ParallelSpec& parallel = run.parallel;
  const Sharding sh = sharding_of(parallel);
  if (sh.offload) {
    for (auto& c : cats) {
      if (c.key != "master_weights" && c.key != "optimizer_states") continue;
      if (!c.bytes || *c.bytes == 0) continue;
      c.on_device = false;
      c.basis += ", in host memory (optimizer offload)";
    }
  }
  if (sh.offload_params) {
    for (auto& c : cats) {
      if (c.key != "params" && c.key != "grads") continue;
      if (!c.bytes || *c.bytes == 0) continue;
      c.on_device = false;
      c.basis += ", in host memory (parameter offload)";
    }
  }
  if (sh.ranks <= 1 || (!sh.states && !sh.grads && !sh.params)) return;
  const bool fsdp = parallel.fsdp_version > 0;
  const FsdpShards fs = fsdp ? fsdp_shards_of(run) : FsdpShards{};
  const std::uint64_t trainable = trainable_count(run.model.inventory);
  for (auto& c : cats) {
    const bool sharded =
        ((c.key == "master_weights" || c.key == "optimizer_states") && sh.states) ||
        ((c.key == "grads" || c.key == "grad_accum") && sh.grads) ||
        (c.key == "params" && sh.params);
    if (!sharded || !c.bytes || *c.bytes == 0) continue;
    if (fsdp && c.key == "grads" && parallel.fsdp_no_sync && run.training.grad_accum > 1) {
      whole_flat_grads(c, fs, trainable, sh.ranks);
      continue;
    }
    const std::uint64_t padded = fsdp ? fsdp_share(c, fs, trainable) : *c.bytes;
    c.bytes = padded == *c.bytes ? shard(*c.bytes, sh.ranks) : padded;
    c.elements = shard(c.elements, sh.ranks);
    c.basis += fmt::format(", sharded over {} ranks ({}{})", sh.ranks, fsdp_label(run),
                           fsdp && fs.padding ? ", padded" : "");
  }
}

// bitsandbytes' paged optimizers: the large states in CUDA unified memory, a row of their own;
// the absmax, qmaps and small tensors' states stay device tensors; `step` is a Python int.
void paged_category(const RunSpec& run, std::vector<Category>& cats) {
  const auto& inv = run.model.inventory;
  const std::uint64_t paged = paged_state_bytes(run.optimizer, inv, run.precision.state);
  auto states = std::find_if(cats.begin(), cats.end(),
                             [](const Category& c) { return c.key == "optimizer_states"; });
  for (auto& c : cats) {
    if (c.key == "optimizer_step" && c.bytes && *c.bytes > 0) {
      c.bytes = 0;
      c.dtype.reset();
      c.basis = "none: bitsandbytes counts steps in a Python int";
    }
  }
  if (states == cats.end() || !states->bytes || paged == 0) return;
  const std::uint64_t total = *states->bytes;
  states->bytes = total - std::min(total, paged);
  states->basis +=
      fmt::format(", less {} in unified memory (the row below)", format_bytes(paged, Unit::bytes));
  Category paged_row = kind_row("optimizer_states_paged", std::nullopt, 0, paged);
  paged_row.on_device = false;
  paged_row.unified = true;
  paged_row.per_param = false;
  paged_row.basis = fmt::format(
      "state1 + state2 of the tensors of {} elements or more, in CUDA unified memory "
      "(cudaMallocManaged): outside the allocator's statistics and the peak",
      format_count(kPagedMinElements));
  cats.insert(states + 1, paged_row);
}

// The rows the techniques of docs/techniques.md change: paged optimizer states live in CUDA
// unified memory; with the optimizer in backward the gradients exist one tensor at a time;
// offloaded activations sit in host memory during the step.
void technique_categories(const RunSpec& run, std::vector<Category>& cats, Estimate& e) {
  if (run.optimizer.paged) paged_category(run, cats);
  for (auto& c : cats) {
    if (run.training.optimizer_in_backward && c.key == "grads" && c.bytes && *c.bytes > 0) {
      std::uint64_t largest = 0;
      for (const auto& g : run.model.inventory.groups) {
        if (g.trainable && !g.quant_state) largest = std::max(largest, g.tensor_elements());
      }
      const std::uint64_t bytes = bytes_for(run.precision.grad, largest);
      if (bytes < *c.bytes) {
        c.basis = fmt::format(
            "optimizer in backward: each gradient applied and freed as it is accumulated, the "
            "largest {} B x {} elements (of {})",
            bytes_per_element_text(run.precision.grad), format_count(largest), c.basis);
        c.bytes = bytes;
      }
    }
  }
  if (run.training.offload_activations && e.activations) {
    e.notes.push_back(fmt::format(
        "activation offloading: the saved tensors of {} B or more are in pinned host memory "
        "between forward and backward (up to {} at a time stay on the device until copied); "
        "the activations row is what is saved, the peak what the device holds",
        detail::kMinOffloadBytes, detail::kOffloadStash));
  }
}

// The saved activations and the peak, from one walk of the step, when --batch and --seq are
// given.
Category activations_and_peak(const RunSpec& run, const EstimateOptions& options, Estimate& e) {
  const auto& p = run.precision;
  Category act = kind_row("activations", p.activation, 0, std::nullopt);
  const auto in = activation_inputs(run);
  if (in) {
    StepEstimate se = estimate_step(run, *in, {.with_terms = true, .timeline = options.timeline});
    const ActivationBytes& ab = se.activations;
    act.bytes = ab.total;
    act.dtype.reset();  // norms, softmax and the loss keep fp32 next to the compute dtype
    act.basis = detail::compiled_format(
        FMT_COMPILE(
            "saved for backward: {} layers x {} + {} embedding and head{}{}, {} attention{}{}"),
        in->L, format_bytes(ab.per_layer, Unit::bytes),
        format_bytes(ab.head + ab.shared + ab.embed, Unit::bytes),
        in->recompute == Recompute::none
            ? ""
            : fmt::format(", {} recompute", recompute_name(in->recompute)),
        in->compile ? ", layers compiled (torch.compile)" : "", attention_name(in->attention),
        in->cuda ? "" : ", cpu kernels", in->approximate ? " (approximate)" : "");
    e.activations_approximate = in->approximate;
    for (const auto& n : in->notes) e.assumptions.push_back(n);
    e.activations = std::move(se.activations);
    e.peak = std::move(se.peak);
  } else {
    act.basis = "not estimated: needs --batch and --seq";
  }
  return act;
}

// Parts of the step that no category row holds: they live only inside the step.
bool outside_rows(Part p) {
  return p == Part::master_grads || p == Part::inputs || p == Part::buffers || p == Part::other;
}

// The named tensors at the peak outside the rows, one entry per name, largest first.
void peak_outside_rows(Estimate& e) {
  if (!e.peak) return;
  for (const LiveTensor& t : e.peak->live) {
    if (!outside_rows(t.part) || t.bytes == 0) continue;
    auto it = std::find_if(e.peak_outside_rows.begin(), e.peak_outside_rows.end(),
                           [&](const Estimate::Named& n) { return n.name == t.name; });
    if (it == e.peak_outside_rows.end()) {
      e.peak_outside_rows.push_back({t.name, t.bytes});
    } else {
      it->bytes = checked_add(it->bytes, t.bytes);
    }
    e.peak_outside_rows_bytes = checked_add(e.peak_outside_rows_bytes, t.bytes);
  }
  // Largest first, ties in first-seen order: an insertion sort, stable as std::stable_sort is,
  // without the temporary buffer it allocates (a handful of names).
  auto& rows = e.peak_outside_rows;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const Estimate::Named n = rows[i];
    std::size_t j = i;
    for (; j > 0 && rows[j - 1].bytes < n.bytes; --j) rows[j] = rows[j - 1];
    rows[j] = n;
  }
}

// A learned position table has no row past its length: such a run fails in the model.
void position_warning(const RunSpec& run, Estimate& e) {
  const auto& arch = run.model.arch;
  const std::uint64_t s = run.training.seq_len;
  if (!arch || arch->max_seq_len == 0 || s <= arch->max_seq_len) return;
  e.warnings.push_back(fmt::format(
      "sequence length {} is past the {} positions of {}'s learned position embedding (the "
      "model fails on such input; the figures are for the shapes alone)",
      format_count(s), format_count(arch->max_seq_len), run.model.name));
}

// Plain data parallelism (DDP) keeps a full replica and, besides, buckets for the all-reduce.
void ddp_note(const RunSpec& run, Estimate& e) {
  if (run.parallel.data_parallel <= 1 || run.parallel.zero_stage > 0) return;
  if (run.parallel.fsdp_version > 0) return;  // NO_SHARD all-reduces the flat gradient in place
  const auto& grads = e.at("grads");
  e.notes.push_back(fmt::format(
      "--dp {} without --zero is plain DDP: every rank holds the whole model, gradients and "
      "states as above; {}",
      run.parallel.data_parallel,
      run.parallel.bucket_view
          ? "the gradients are views into DDP's all-reduce buckets (--ddp-bucket-view)"
          : fmt::format("DDP's all-reduce buckets hold a second copy of the gradients ({} B), "
                        "counted in the peak; --ddp-bucket-view if gradient_as_bucket_view=True",
                        format_count(grads.bytes.value_or(0)))));
}

// FSDP: how the run shards, and FSDP's buffers live at the peak (src/step/walk_fsdp.cpp names
// them).
void fsdp_note(const RunSpec& run, Estimate& e) {
  const auto& p = run.parallel;
  if (p.fsdp_version == 0 || p.data_parallel <= 1) return;
  if (p.zero_stage == 0) {
    e.notes.push_back(fmt::format(
        "{} over {} ranks: every rank holds the whole model; the gradients are all-reduced in "
        "place (no DDP buckets)",
        fsdp_label(run), p.data_parallel));
    return;
  }
  if (!e.peak) {
    e.notes.push_back(
        fmt::format("{}: states sharded over {} ranks", fsdp_label(run), p.shard_ranks()));
    return;
  }
  std::vector<std::string> live;
  for (const LiveTensor& t : e.peak->live) {
    const bool ours = t.name.starts_with("FSDP") || t.name.starts_with("unsharded gradient") ||
                      t.name.starts_with("gradients of the unit") ||
                      t.name.starts_with("flat gradient");
    if (!ours || t.bytes == 0) continue;
    live.push_back(fmt::format("{}{} {} B", t.count > 1 ? fmt::format("{} x ", t.count) : "",
                               t.name, format_count(t.bytes)));
  }
  e.notes.push_back(fmt::format(
      "{}: states sharded over {} ranks; {}", fsdp_label(run), p.shard_ranks(),
      live.empty() ? std::string("no FSDP buffer is live at the peak")
                   : fmt::format("FSDP's buffers at the peak: {}", fmt::join(live, "; "))));
}

}  // namespace

double Category::bytes_per_element() const {
  if (!bytes || elements == 0) return 0.0;
  return static_cast<double>(*bytes) / static_cast<double>(elements);
}

const Category& Estimate::at(std::string_view key) const {
  for (const auto& c : categories) {
    if (c.key == key) return c;
  }
  throw std::out_of_range(fmt::format("no category \"{}\"", key));
}

namespace {

// The rows of the model state: parameters, autocast's weight copies, master weights,
// gradients, the accumulation buffer, the optimizer's states and step counters.
void model_state_categories(const RunSpec& run, Estimate& e) {
  const auto& inv = run.model.inventory;
  const auto& p = run.precision;
  // Autocast copies the weights that feed a matmul, trainable or frozen alike: the copy is made
  // whenever the op runs. Weights stored in another dtype (QLoRA's nf4) are dequantized inside
  // the kernel instead, and keep no copy; adapters of their own dtype (--adapter-dtype) are cast.
  std::uint64_t matmul = 0;
  for (const auto& g : inv.groups) {
    if (g.matmul && !g.quant_state && (!g.storage || g.role == Role::adapter))
      matmul = checked_add(matmul, g.elements());
  }
  auto& cats = e.categories;
  cats.reserve(16);  // the model state's, the activations', the techniques' rows
  cats.push_back(params_category(inv, p.param, e.params));
  cats.push_back(dtype_category("working_copies", p.working, matmul, "matmul weights"));
  cats.push_back(dtype_category("master_weights", p.master, e.trainable, "trainable params"));
  cats.push_back(dtype_category("grads", p.grad, e.trainable, "trainable params"));
  cats.push_back(dtype_category("grad_accum", p.grad_accum, e.trainable, "trainable params"));
  const OptimizerBytes ob = optimizer_bytes(run.optimizer, inv, p.state);
  cats.push_back(optimizer_states(ob, e.trainable, p.state));
  // The trainable tensors, counted by optimizer_bytes where step_counters reads them (4 B each).
  cats.push_back(step_counters(ob, run.optimizer,
                               inv.shapes_known ? std::optional(ob.step_bytes / 4) : std::nullopt));
  for (const auto& a : ob.assumptions) e.assumptions.push_back(a);
}

// The totals of the rows: on the device, in host memory, in CUDA unified memory.
void category_totals(Estimate& e) {
  e.total_complete = true;
  for (const auto& c : e.categories) {
    if (c.unified) {
      if (c.bytes) e.unified_bytes = checked_add(e.unified_bytes, *c.bytes);
      continue;
    }
    if (!c.on_device) {
      if (c.bytes) e.host_bytes = checked_add(e.host_bytes, *c.bytes);
      continue;
    }
    if (c.bytes) {
      e.total_bytes = checked_add(e.total_bytes, *c.bytes);
    } else {
      e.total_complete = false;
    }
  }
}

Estimate estimate_device(const RunSpec& run, const EstimateOptions& options) {
  const auto& inv = run.model.inventory;
  Estimate e;
  if (const auto& q = run.model.checkpoint_quant) {
    e.assumptions.push_back(fmt::format(
        "the checkpoint is stored quantised ({}: {:.3g} bits per weight, {}); parameters are "
        "sized by the precision policy, as when it is loaded dequantised for training "
        "(--qlora for a frozen 4-bit base)",
        q->method, q->bits_per_weight, q->detail));
  }
  e.params = parameter_count(inv);
  e.trainable = trainable_count(inv);
  e.active = run.model.active_params != 0 ? run.model.active_params : e.params;
  if (inv.shapes_known) e.tensors = tensor_count(inv);
  model_state_categories(run, e);
  e.categories.push_back(activations_and_peak(run, options, e));
  if (!inv.shapes_known && run.precision.working) {
    e.assumptions.push_back(
        "bare parameter count: every parameter is taken as a matmul weight for autocast copies");
  }
  shard_categories(e.categories, run);
  technique_categories(run, e.categories, e);
  category_totals(e);
  peak_outside_rows(e);
  position_warning(run, e);
  ddp_note(run, e);
  fsdp_note(run, e);
  if (run.budget) e.budget = check_budget(e.needed(), *run.budget);
  return e;
}

StageSummary summary_of(const RankSpec& r, const Estimate& e) {
  StageSummary s;
  s.stage = r.stage;
  s.first_layer = r.first_layer;
  s.layers = r.layers;
  s.chunks = r.chunks;
  s.schedule = r.schedule;
  s.in_flight = r.in_flight;
  s.embedding = r.embedding;
  s.head = r.head;
  s.params = e.params;
  s.total_bytes = e.total_bytes;
  if (e.peak) s.peak_bytes = e.peak->bytes;
  if (e.peak && e.peak->allocator) s.allocated_bytes = e.peak->allocator->allocated;
  s.needed = e.peak ? e.peak->needed : e.total_bytes;
  return s;
}

// A stage's live bytes at each step of its pipeline schedule (--plot): the largest forward or
// backward moment of its walk, which holds the other pairs of its peak step (RankSpec::held)
// beside the running one, with the other pairs of that step instead: a chunk's saved layers for
// each pair more or fewer, the embeddings' and the head's for the pairs of the chunks that have
// them. The running pair is walked as the stage's walk does, with the stage's ends.
std::vector<u64> schedule_series(const RunSpec& r, const Estimate& e) {
  std::vector<u64> out;
  if (!e.activations || !e.peak || r.parallel.pipeline <= 1) return out;
  const ActivationBytes& a = *e.activations;
  u64 top = 0;
  for (const Moment& m : e.peak->moments) {
    const Phase ph = phase_of(m.id.kind);
    if (ph == Phase::forward || ph == Phase::backward) top = std::max(top, m.bytes);
  }
  const HeldChunks& at_peak = r.rank.held;
  for (const HeldChunks& h : stage_schedule_held(r, r.rank.stage)) {
    u64 more = 0, fewer = 0;
    const auto shift = [&](u64 now, u64 peak, u64 each) {
      if (now >= peak) more = checked_add(more, checked_mul(now - peak, each));
      if (now < peak) fewer = checked_add(fewer, checked_mul(peak - now, each));
    };
    shift(h.chunks, at_peak.chunks, a.layers);
    shift(h.with_embedding, at_peak.with_embedding, a.embed);
    shift(h.with_head, at_peak.with_head, a.head);
    const u64 sum = checked_add(top, more);
    out.push_back(sum > fewer ? sum - fewer : 0);
  }
  return out;
}

// The run's estimate: its one device's, or that of the pipeline stage that needs the most.
Estimate estimate_stages(const RunSpec& run, const EstimateOptions& options) {
  if (!run.parallel.splits_model() || run.rank.split()) return estimate_device(run, options);
  // One device per pipeline stage; the report is that of the stage that needs the most.
  std::vector<StageSummary> stages;
  std::optional<Estimate> worst;
  for (const RunSpec& r : stage_runs(run)) {
    Estimate e = estimate_device(r, options);
    stages.push_back(summary_of(r.rank, e));
    if (options.timeline) stages.back().schedule_bytes = schedule_series(r, e);
    if (!worst ||
        stages.back().needed > stages[static_cast<std::size_t>(worst->worst_stage)].needed) {
      e.worst_stage = r.rank.stage;
      worst = std::move(e);
    }
  }
  Estimate out = std::move(*worst);
  out.stages = std::move(stages);
  for (auto& note : layout_notes(run)) out.assumptions.push_back(std::move(note));
  return out;
}

}  // namespace

Estimate estimate(const RunSpec& run, const EstimateOptions& options) {
  Estimate out = estimate_stages(run, options);
  const auto& stack = run.training.stack_assumptions;  // --stack's version rules, first
  out.assumptions.insert(out.assumptions.begin(), stack.begin(), stack.end());
  if (run.from) {  // memest --from: the file's keys that change memory in ways not modelled
    for (const auto& key : run.from->not_modelled)
      out.notes.push_back(fmt::format("not modelled: {}", key));
  }
  return out;
}

}  // namespace memest
