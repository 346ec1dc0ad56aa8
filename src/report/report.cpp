#include "report/json_dump.hpp"
#include "report/report_text.hpp"

#include <memest/report.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#ifndef MEMEST_VERSION
#define MEMEST_VERSION "0.0.0"
#endif

namespace memest {
namespace {

using nlohmann::ordered_json;

std::string dtype_or_dash(const std::optional<Dtype>& d) {
  return d ? std::string(dtype_name(*d)) : "-";
}

std::string per_element(const Category& c) {
  if (!c.bytes || c.elements == 0 || !c.per_param) return "-";
  return fmt::format("{:.2f}", c.bytes_per_element());
}

std::string size_cell(const Category& c, Unit unit) {
  if (!c.bytes) return "not estimated";
  if (*c.bytes == 0) return "-";
  // One unit per column: a few bytes (step counters) are "< 0.01 GB"; the basis has them exact.
  return format_bytes(*c.bytes, unit);
}

std::string model_line(const RunSpec& run, const Estimate& e) {
  // A split model is named whole; the counts of the device the table shows follow.
  const std::uint64_t whole = parameter_count(run.model.inventory);
  const bool split = run.parallel.splits_model() && whole != e.params;
  std::string line =
      split ? fmt::format("model      {}: {} parameters\nper device {} parameters", run.model.name,
                          format_count(whole), format_count(e.params))
            : fmt::format("model      {}: {} parameters", run.model.name, format_count(e.params));
  if (e.trainable != e.params) line += fmt::format(", {} trainable", format_count(e.trainable));
  if (e.active != e.params) line += fmt::format(", {} active per token", format_count(e.active));
  if (!run.model.source.empty()) line += fmt::format("\nconfig     {}", run.model.source);
  return line;
}

ordered_json optional_dtype(const std::optional<Dtype>& d) {
  return d ? ordered_json(dtype_name(*d)) : ordered_json(nullptr);
}

ordered_json precision_json(const PrecisionPolicy& p) {
  return {{"name", p.name},
          {"param_dtype", dtype_name(p.param)},
          {"working_copy_dtype", optional_dtype(p.working)},
          {"master_dtype", optional_dtype(p.master)},
          {"grad_dtype", dtype_name(p.grad)},
          {"grad_accum_dtype", optional_dtype(p.grad_accum)},
          {"state_dtype", dtype_name(p.state)},
          {"activation_dtype", dtype_name(p.activation)},
          {"autocast", p.autocast}};
}

ordered_json optimizer_json(const OptimizerSpec& o) {
  ordered_json j = {{"name", optimizer_name(o.kind)}, {"impl", optimizer_impl_name(o.impl)}};
  if (o.kind == OptimizerKind::sgd_momentum) j["nesterov"] = o.nesterov;
  if (o.kind == OptimizerKind::adam || o.kind == OptimizerKind::adamw) j["amsgrad"] = o.amsgrad;
  if (o.kind == OptimizerKind::rmsprop) {
    j["momentum"] = o.momentum;
    j["centered"] = o.centered;
  }
  if (o.kind == OptimizerKind::adafactor) j["first_moment"] = o.first_moment;
  return j;
}

ordered_json training_json(const TrainingSpec& t) {
  auto zero_null = [](std::uint64_t v) { return v ? ordered_json(v) : ordered_json(nullptr); };
  return {{"micro_batch", zero_null(t.micro_batch)},
          {"seq_len", zero_null(t.seq_len)},
          {"grad_accum", t.grad_accum},
          {"attention", attention_name(t.attention)},
          {"recompute", recompute_name(t.recompute)},
          {"loss", loss_name(t.loss)},
          {"stack", t.stack.empty() ? ordered_json(nullptr) : ordered_json(t.stack)},
          {"dropout", t.dropout ? ordered_json(*t.dropout) : ordered_json(nullptr)},
          {"zero_grad", t.grads_set_to_none ? "none" : "zero"},
          {"device", device_name(t.device)},
          {"allocator", allocator_name(t.allocator)},
          {"context_reserve", t.context_reserve}};
}

std::string peak_parts(const Moment& m, Unit unit) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < kPartCount; ++i) {
    if (m.parts[i] == 0) continue;
    parts.push_back(
        fmt::format("{} {}", part_label(static_cast<Part>(i)), format_bytes(m.parts[i], unit)));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The tensors at the peak that no row holds, the largest by name: with the rows they make up
// the peak (mixed precision's fp32 master gradients, the optimizer step's temporaries).
std::string outside_rows_line(const Estimate& e, Unit unit) {
  constexpr std::size_t kShown = 3;
  std::vector<std::string> items;
  std::uint64_t shown = 0;
  for (std::size_t i = 0; i < e.peak_outside_rows.size() && i < kShown; ++i) {
    const auto& n = e.peak_outside_rows[i];
    if (i > 0 && n.bytes * 100 < e.peak_outside_rows_bytes) break;  // the rest, summed below
    items.push_back(fmt::format("{} {}", n.name, format_bytes(n.bytes, unit)));
    shown += n.bytes;
  }
  if (e.peak_outside_rows.size() > items.size()) {
    items.push_back(fmt::format("{} more {}", e.peak_outside_rows.size() - items.size(),
                                format_bytes(e.peak_outside_rows_bytes - shown, unit)));
  }
  return fmt::format("  in no row above ({} in all, only inside the step): {}\n",
                     format_bytes(e.peak_outside_rows_bytes, unit), fmt::join(items, ", "));
}

// Under a budget, what the allocator did when cudaMalloc failed (AllocatorReplay).
std::string allocator_retry_line(const AllocatorReplay& a) {
  std::string out = fmt::format(
      "    cudaMalloc failed at the budget: {} cached segment{} freed and the request retried",
      a.released_segments, a.released_segments == 1 ? "" : "s");
  if (a.out_of_memory) {
    out += fmt::format("; {} request{} still did not fit (out of memory)", a.out_of_memory,
                       a.out_of_memory == 1 ? "" : "s");
  }
  return out + "\n";
}

std::string render_peak(const RunSpec& run, const Estimate& e, Unit unit) {
  if (!e.peak) return "";
  const Peak& pk = *e.peak;
  const Moment& m = pk.peak_moment();
  const std::string at = is_whole_phase(m.id.kind)
                             ? fmt::format("in the {} phase", pk.phase)
                             : fmt::format("in the {} phase, at {}", pk.phase, m.name);
  std::string out = fmt::format("{:<44} {:>16}  {}{}\n", "peak over a step (live bytes)",
                                format_bytes(pk.bytes, unit), at,
                                e.activations_approximate ? ", approximate" : "");
  out += fmt::format("  live at the peak: {}\n", peak_parts(m, unit));
  if (!e.peak_outside_rows.empty()) out += outside_rows_line(e, unit);
  if (pk.first_step_bytes != pk.bytes || pk.first_step_id != m.id) {
    out += fmt::format("  first step {} at {} ({}); steady state {} at {}\n",
                       format_bytes(pk.first_step_bytes, unit), pk.first_step_phase,
                       pk.first_step_moment, format_bytes(pk.bytes, unit), pk.phase);
  }
  if (pk.allocator) {
    const AllocatorReplay& a = *pk.allocator;
    const std::string te = a.te_workspace ? fmt::format(", Transformer Engine's {}",
                                                        format_bytes(a.te_workspace, unit))
                                          : "";
    out += fmt::format(
        "  cuda caching allocator, replayed over model loading and two steps ({} segments, "
        "cuBLAS workspaces {} x {}{}):\n",
        a.segments, kCublasThreads, format_bytes(a.cublas_workspace / kCublasThreads, unit), te);
    out +=
        fmt::format("    allocated (max_memory_allocated) {} at {}, {}\n",
                    format_bytes(a.allocated, unit), a.allocated_at.stretch, a.allocated_at.moment);
    out += fmt::format("    reserved (max_memory_reserved)   {} at {}, {}; {} after loading\n",
                       format_bytes(a.reserved, unit), a.reserved_at.stretch, a.reserved_at.moment,
                       format_bytes(a.setup_reserved, unit));
    if (a.released_segments || a.out_of_memory) out += allocator_retry_line(a);
  }
  if (pk.context_reserve) {
    out += fmt::format("  + context reserve {} (a stated constant)\n",
                       format_bytes(pk.context_reserve, unit));
  }
  if (pk.nvidia_smi_bytes) {
    out += fmt::format("  nvidia-smi (reserved + context): {}\n",
                       format_bytes(*pk.nvidia_smi_bytes, unit));
  }
  if (pk.needed != pk.bytes) {
    out += fmt::format("{:<44} {:>16}\n", "needed per device", format_bytes(pk.needed, unit));
  }
  if (run.training.grad_accum > 1) {
    out += fmt::format(
        "  grad accumulation {}: gradients live through every micro-batch after the first\n",
        run.training.grad_accum);
  }
  return out;
}

// "4*N*h = 4 x 512 x 4096", from the tensor's width and shape.
std::string term_formula(const ActivationTerm& t, const ActivationBytes& ab) {
  if (t.shape.rank == 0) return fmt::format("{} B", t.width);
  return fmt::format("{}*{} = {} x {}", t.width, t.shape.symbols(), t.width,
                     t.shape.values(ab.b, ab.s, ab.t));
}

std::string_view term_group(Scope s) {
  switch (s) {
    case Scope::shared:
      return "shared";
    case Scope::embed:
      return "embed";
    case Scope::head:
      return "head";
    default:
      return "per layer";
  }
}

std::string term_copies(const ActivationTerm& t) {
  return t.count == 0 ? "recomputed in backward, not stored" : fmt::format("x {}", t.count);
}

std::string render_activation_terms(const Estimate& e) {
  if (!e.activations) return "";
  const auto& A = *e.activations;
  std::string out = fmt::format(
      "\nactivations saved for backward (N = b*s = {} x {} = {}; h {}, heads a {}, kv heads {}, "
      "head dim d {}, MLP I {}, vocab V {}, layers {})\n",
      A.b, A.s, A.b * A.s, A.h, A.a, A.k, A.d, A.I, A.V, A.L);
  std::string_view group;
  for (const auto& t : A.terms) {
    if (term_group(t.scope) != group) {
      group = term_group(t.scope);
      out += fmt::format("  {}\n", group);
    }
    out += fmt::format("    {:<66} {:>14}  {:<36} {}\n", t.name, format_count(t.bytes),
                       term_formula(t, A), term_copies(t));
  }
  out += fmt::format("  per layer {} (without recompute {}); {} layers {}\n",
                     format_count(A.per_layer), format_count(A.full_layer), A.L,
                     format_count(A.layers));
  out += fmt::format("  total = layers {} + shared {} + embed {} + head {} = {} bytes\n",
                     format_count(A.layers), format_count(A.shared), format_count(A.embed),
                     format_count(A.head), format_count(A.total));
  return out;
}

std::string render_walk(const Estimate& e) {
  if (!e.peak) return "";
  const Peak& pk = *e.peak;
  std::string out = "\nphase walk (live bytes at each moment, steady state)\n";
  for (std::size_t i = 0; i < pk.moments.size(); ++i) {
    const auto& m = pk.moments[i];
    out += fmt::format("  {:<12} {:<32} {:>18}{}\n", m.phase, m.name, format_count(m.bytes),
                       i == pk.winner ? "  <- peak" : "");
  }
  out += fmt::format("  peak {} bytes at {} ({}): {}\n", format_count(pk.bytes), pk.phase,
                     pk.peak_moment().name, peak_parts(pk.peak_moment(), Unit::bytes));
  out += "  live at the peak, tensor by tensor\n";
  for (const auto& t : pk.live) {
    out += fmt::format("    {:<16} {:<66} {:>18}{}\n", part_name(t.part), t.name,
                       format_count(t.bytes),
                       t.count > 1 ? fmt::format("  ({} x {})", t.count, format_count(t.bytes_each))
                                   : std::string());
  }
  return out;
}

ordered_json activations_json(const Estimate& e) {
  if (!e.activations) return nullptr;
  const auto& A = *e.activations;
  ordered_json list = ordered_json::array();
  for (const auto& t : A.terms) {
    list.push_back({{"scope", scope_name(t.scope)},
                    {"name", t.name},
                    {"bytes", t.bytes},
                    {"count", t.count},
                    {"formula", term_formula(t, A)}});
  }
  return {{"bytes", A.total},
          {"approximate", e.activations_approximate},
          {"layers", A.L},
          {"per_layer_bytes", A.per_layer},
          {"full_layer_bytes", A.full_layer},
          {"layers_bytes", A.layers},
          {"shared_bytes", A.shared},
          {"embed_bytes", A.embed},
          {"head_bytes", A.head},
          {"saved_weight_copies_bytes", e.peak ? e.peak->saved_weight_copies : 0},
          {"terms", list}};
}

ordered_json parts_json(const Moment& m) {
  ordered_json j = ordered_json::object();
  for (std::size_t i = 0; i < kPartCount; ++i)
    j[std::string(part_name(static_cast<Part>(i)))] = m.parts[i];
  return j;
}

// --allocator cuda: the replay's figures and where each peaks; null without it.
ordered_json allocator_json(const Peak& pk) {
  if (!pk.allocator) return nullptr;
  const AllocatorReplay& a = *pk.allocator;
  const auto at = [](const RunInstant& i) {
    return ordered_json{{"stretch", i.stretch}, {"moment", i.moment}};
  };
  return {{"allocated_bytes", a.allocated},
          {"allocated_at", at(a.allocated_at)},
          {"reserved_bytes", a.reserved},
          {"reserved_at", at(a.reserved_at)},
          {"setup_reserved_bytes", a.setup_reserved},
          {"segments", a.segments},
          {"released_segments", a.released_segments},
          {"out_of_memory", a.out_of_memory},
          {"cublas_workspace_bytes", a.cublas_workspace},
          {"te_workspace_bytes", a.te_workspace}};
}

ordered_json peak_json(const Estimate& e) {
  if (!e.peak) return nullptr;
  const Peak& pk = *e.peak;
  ordered_json phases = ordered_json::object();
  for (const auto& ph : pk.by_phase) {
    phases[std::string(ph.phase)] = {{"bytes", ph.bytes}, {"moment", ph.moment}};
  }
  ordered_json live = ordered_json::array();
  for (const auto& t : pk.live) {
    live.push_back(
        {{"name", t.name}, {"part", part_name(t.part)}, {"count", t.count}, {"bytes", t.bytes}});
  }
  ordered_json moments = ordered_json::array();
  for (const auto& m : pk.moments) {
    moments.push_back({{"name", m.name}, {"phase", m.phase}, {"bytes", m.bytes}});
  }
  auto opt = [](const std::optional<std::uint64_t>& v) {
    return v ? ordered_json(*v) : ordered_json(nullptr);
  };
  ordered_json outside = ordered_json::array();
  for (const auto& n : e.peak_outside_rows)
    outside.push_back({{"name", n.name}, {"bytes", n.bytes}});
  return {{"bytes", pk.bytes},
          {"phase", pk.phase},
          {"moment", pk.peak_moment().name},
          {"approximate", e.activations_approximate},
          {"composition", parts_json(pk.peak_moment())},
          {"live", live},
          {"outside_rows", outside},
          {"outside_rows_bytes", e.peak_outside_rows_bytes},
          {"by_phase", phases},
          {"first_step",
           {{"bytes", pk.first_step_bytes},
            {"phase", pk.first_step_phase},
            {"moment", pk.first_step_moment}}},
          {"allocated_bytes", opt(pk.allocated_bytes)},
          {"reserved_bytes", opt(pk.reserved_bytes)},
          {"allocator", allocator_json(pk)},
          {"context_reserve_bytes", pk.context_reserve},
          {"nvidia_smi_bytes", opt(pk.nvidia_smi_bytes)},
          {"needed_bytes", pk.needed},
          {"moments", moments}};
}

// The budget and the verdict: null without --gpu or --budget.
ordered_json budget_json(const RunSpec& run, const Estimate& e) {
  if (!run.budget || !e.budget) return nullptr;
  const auto& c = *e.budget;
  return {{"source", run.budget->source},
          {"capacity_bytes", run.budget->capacity},
          {"reserve_bytes", run.budget->reserve},
          {"usable_bytes", c.usable},
          {"need_bytes", c.need},
          {"fits", c.fits},
          {"headroom_bytes", c.headroom},
          {"over_bytes", c.over}};
}

struct RoleTotals {
  std::uint64_t tensors = 0, params = 0, trainable = 0;
};

// Parameters per role, in the order roles are declared; quantization constants left out.
std::vector<std::pair<Role, RoleTotals>> by_role(const Inventory& inv) {
  std::vector<std::pair<Role, RoleTotals>> out;
  for (std::size_t r = 0; r < role_names().size(); ++r) {
    RoleTotals t;
    for (const auto& g : inv.groups) {
      if (g.quant_state || static_cast<std::size_t>(g.role) != r) continue;
      t.tensors += g.count;
      t.params += g.elements();
      if (g.trainable) t.trainable += g.elements();
    }
    if (t.tensors > 0) out.emplace_back(static_cast<Role>(r), t);
  }
  return out;
}

std::string shape(const TensorGroup& g) {
  return g.rows == 1 ? fmt::format("{}", g.cols) : fmt::format("{} x {}", g.rows, g.cols);
}

std::string render_inventory(const ModelSpec& model) {
  const auto& inv = model.inventory;
  if (!inv.shapes_known) return "\nparameter inventory: unknown for a bare parameter count\n";
  std::string out = "\nparameters by role\n";
  out += fmt::format("{:<12} {:>8} {:>18} {:>18}\n", "role", "tensors", "params", "trainable");
  for (const auto& [role, t] : by_role(inv)) {
    out += fmt::format("{:<12} {:>8} {:>18} {:>18}\n", role_name(role), t.tensors,
                       format_count(t.params), format_count(t.trainable));
  }
  out += fmt::format("{:<12} {:>8} {:>18} {:>18}\n", "total", tensor_count(inv),
                     format_count(parameter_count(inv)), format_count(trainable_count(inv)));
  out += "\nparameter groups (x count: one tensor per layer, expert, ...)\n";
  for (const auto& g : inv.groups) {
    std::string flags;
    if (g.matmul) flags += " matmul";
    if (!g.trainable) flags += " frozen";
    if (g.storage) flags += fmt::format(" {}", dtype_name(*g.storage));
    if (g.quant_state) flags += " quantization-constants";
    out += fmt::format("  {:<52} {:<10} {:>14} x{:<4} {:>16}{}\n", g.name, role_name(g.role),
                       shape(g), g.count, format_count(g.elements()), flags);
  }
  return out;
}

ordered_json inventory_json(const Inventory& inv) {
  ordered_json roles = ordered_json::object();
  for (const auto& [role, t] : by_role(inv)) {
    roles[std::string(role_name(role))] = {
        {"tensors", t.tensors}, {"params", t.params}, {"trainable", t.trainable}};
  }
  ordered_json groups = ordered_json::array();
  for (const auto& g : inv.groups) {
    groups.push_back({{"name", g.name},
                      {"role", role_name(g.role)},
                      {"shape", g.rows == 1 ? ordered_json::array({g.cols})
                                            : ordered_json::array({g.rows, g.cols})},
                      {"count", g.count},
                      {"elements", g.elements()},
                      {"matmul", g.matmul},
                      {"trainable", g.trainable},
                      {"storage_dtype", optional_dtype(g.storage)},
                      {"quantization_constants", g.quant_state}});
  }
  return {{"by_role", roles}, {"groups", groups}};
}

}  // namespace

ordered_json parallel_json(const ParallelSpec& p) {
  return {{"data_parallel", p.data_parallel}, {"zero_stage", p.zero_stage},
          {"tensor_parallel", p.tensor},      {"sequence_parallel", p.sequence},
          {"pipeline_parallel", p.pipeline},  {"virtual_stages", p.virtual_stages},
          {"microbatches", p.microbatches},   {"context_parallel", p.context},
          {"expert_parallel", p.expert},      {"world_size", p.world_size()}};
}

namespace {

// The layers of each model chunk of a stage, [first, last] each.
ordered_json layer_ranges_json(const StageSummary& s) {
  ordered_json out = ordered_json::array();
  for (const LayerRange& c : s.chunks) out.push_back({c.first, c.last});
  return out;
}

}  // namespace

// Every pipeline stage of a split run, the worst marked; an empty list for a whole model.
ordered_json stages_json(const Estimate& e) {
  ordered_json list = ordered_json::array();
  for (const StageSummary& s : e.stages) {
    list.push_back(
        {{"stage", s.stage},
         {"first_layer", s.first_layer},
         {"layers", s.layers},
         {"embedding", s.embedding},
         {"head", s.head},
         {"layer_ranges", layer_ranges_json(s)},
         {"schedule", pipe_schedule_names()[static_cast<std::size_t>(s.schedule)]},
         {"in_flight_microbatches", s.in_flight},
         {"parameters", s.params},
         {"total_bytes", s.total_bytes},
         {"peak_bytes", s.peak_bytes ? ordered_json(*s.peak_bytes) : ordered_json()},
         {"allocated_bytes", s.allocated_bytes ? ordered_json(*s.allocated_bytes) : ordered_json()},
         {"needed_bytes", s.needed},
         {"worst", s.stage == e.worst_stage}});
  }
  return list;
}

namespace {

// The layers a stage holds: "8-15", or by model chunk, "0,4" or "0-1,8-9".
std::string stage_layers_text(const StageSummary& s) {
  if (s.chunks.size() <= 1)
    return fmt::format("{}-{}", s.first_layer, s.first_layer + s.layers - 1);
  std::vector<std::string> parts;
  for (const LayerRange& c : s.chunks)
    parts.push_back(c.first == c.last ? fmt::format("{}", c.first)
                                      : fmt::format("{}-{}", c.first, c.last));
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace

std::string render_stages(const Estimate& e, Unit unit) {
  if (e.stages.size() <= 1) {
    return e.stages.empty() ? ""
                            : fmt::format("per device: {} parameters of the split model\n",
                                          format_count(e.params));
  }
  std::string out = fmt::format(
      "\nper pipeline stage (one device each; the rows above are stage "
      "{}, the one that needs the most)\n",
      e.worst_stage);
  // The layers column is as wide as its widest entry (a stage of many chunks), 9 at least.
  std::size_t width = 9;
  for (const StageSummary& s : e.stages) width = std::max(width, stage_layers_text(s).size());
  out += fmt::format("  {:>5}  {:>{}}  {:>9}  {:>15}  {:>16}  {:>16}\n", "stage", "layers", width,
                     "in flight", "parameters", "peak", "needs");
  for (const StageSummary& s : e.stages) {
    out += fmt::format("  {:>5}  {:>{}}  {:>9}  {:>15}  {:>16}  {:>16}{}\n", s.stage,
                       stage_layers_text(s), width, s.in_flight, format_count(s.params),
                       s.peak_bytes ? format_bytes(*s.peak_bytes, unit) : "-",
                       format_bytes(s.needed, unit), s.stage == e.worst_stage ? "  <- worst" : "");
  }
  return out;
}

std::string_view version() { return MEMEST_VERSION; }

std::string_view total_label(const Estimate& e) {
  return e.total_complete ? "device total (sum of the device rows)"
                          : "device total (sum, without activations)";
}

std::string render_peak_and_notes(const RunSpec& run, const Estimate& e, Unit unit) {
  std::string out = render_peak(run, e, unit) + render_stages(e, unit);
  for (const auto& a : e.assumptions) out += fmt::format("assumed: {}\n", a);
  for (const auto& n : e.notes) out += fmt::format("note: {}\n", n);
  for (const auto& w : e.warnings) out += fmt::format("warning: {}\n", w);
  return out;
}

std::string render_table(const RunSpec& run, const Estimate& e, const ReportOptions& options) {
  std::string out;
  out += model_line(run, e) + "\n";
  out += fmt::format("optimizer  {}\n", optimizer_name(run.optimizer.kind));
  out += fmt::format("precision  {}: {}\n\n", run.precision.name, run.precision.summary);
  out += fmt::format("{:<26} {:<9} {:>7} {:>16}  {}\n", "category", "dtype", "B/param", "size",
                     "basis");
  for (const auto& c : e.categories) {
    std::string size = size_cell(c, options.unit);
    if (!c.on_device && c.bytes && *c.bytes > 0) size += c.unified ? " (unified)" : " (host)";
    out += fmt::format("{:<26} {:<9} {:>7} {:>16}  {}\n", c.label, dtype_or_dash(c.dtype),
                       per_element(c), size, c.basis);
  }
  out += fmt::format("{:<44} {:>16}\n", total_label(e), format_bytes(e.total_bytes, options.unit));
  if (const auto host = e.host_bytes; host * 100 >= unit_bytes(options.unit)) {
    out += fmt::format("{:<44} {:>16}\n", "host memory (rows marked host)",
                       format_bytes(host, options.unit));
  }
  if (e.unified_bytes > 0) {
    out += fmt::format("{:<44} {:>16}\n", "unified memory (paged, not in the peak)",
                       format_bytes(e.unified_bytes, options.unit));
  }
  out += render_peak_and_notes(run, e, options.unit);
  if (options.explain) {
    out += render_inventory(run.model);
    out += render_activation_terms(e);
    out += render_walk(e);
  }
  return out;
}

namespace {

// The run as resolved: what a run config cannot hold (the model's name and source, the
// policy's dtypes, the layout's world size).
ordered_json resolved_run_json(const RunSpec& run) {
  ordered_json r = {{"model",
                     {{"name", run.model.name},
                      {"architecture", run.model.arch ? ordered_json(run.model.arch->model_type)
                                                      : ordered_json(nullptr)}}},
                    {"precision", precision_json(run.precision)},
                    {"optimizer", optimizer_json(run.optimizer)},
                    {"training", training_json(run.training)},
                    {"parallel", parallel_json(run.parallel)}};
  // Present only when the model was looked up or its checkpoint is quantised.
  auto& model = r["model"];
  if (!run.model.source.empty()) model["source"] = run.model.source;
  if (const auto& q = run.model.checkpoint_quant) {
    model["checkpoint_quantization"] = {
        {"method", q->method}, {"bits_per_weight", q->bits_per_weight}, {"detail", q->detail}};
  }
  return r;
}

// memest --from: the file, each key that set an option with where it came from, and the keys
// that change memory in ways memest does not model.
ordered_json from_json(const FromReport& from) {
  ordered_json used = ordered_json::array();
  for (const auto& k : from.used)
    used.push_back({{"key", k.key}, {"value", k.value}, {"option", k.flag}, {"where", k.where}});
  return {{"file", from.file},
          {"format", from.format},
          {"used", used},
          {"not_modelled", from.not_modelled}};
}

}  // namespace

std::string render_json(const RunSpec& run, const Estimate& e, const ReportOptions& options,
                        std::string_view run_config) {
  ordered_json j;
  j["schema_version"] = kJsonSchemaVersion;
  j["memest_version"] = version();
  j["inputs"] = ordered_json::parse(run_config);
  if (run.from) j["from"] = from_json(*run.from);
  j["run"] = resolved_run_json(run);
  j["parameters"] = {{"total", e.params},
                     {"trainable", e.trainable},
                     {"active", e.active},
                     {"tensors", e.tensors ? ordered_json(*e.tensors) : ordered_json(nullptr)}};
  if (run.model.inventory.shapes_known && !run.parallel.splits_model()) {  // the whole model's
    const auto inv = inventory_json(run.model.inventory);
    j["parameters"]["by_role"] = inv["by_role"];
    j["parameters"]["groups"] = inv["groups"];
  }
  ordered_json cats = ordered_json::object();
  for (const auto& c : e.categories) {
    cats[c.key] = {{"label", c.label},
                   {"dtype", optional_dtype(c.dtype)},
                   {"elements", c.elements},
                   {"bytes_per_element", c.bytes_per_element()},
                   {"bytes", c.bytes ? ordered_json(*c.bytes) : ordered_json(nullptr)},
                   {"location", c.unified     ? "unified"
                                : c.on_device ? "device"
                                              : "host"},
                   {"basis", c.basis}};
  }
  j["categories"] = cats;
  j["total"] = {{"bytes", e.total_bytes},
                {"host_bytes", e.host_bytes},
                {"method", "sum"},
                {"complete", e.total_complete},
                {"formatted", format_bytes(e.total_bytes, options.unit)}};
  // Paged optimizer states (CUDA unified memory): apart from the device total and the peak.
  if (e.unified_bytes > 0) j["total"]["unified_bytes"] = e.unified_bytes;
  j["budget"] = budget_json(run, e);
  j["activations"] = activations_json(e);
  j["peak"] = peak_json(e);
  j["stages"] = stages_json(e);
  j["units"] = unit_label(options.unit);
  j["assumptions"] = e.assumptions;
  j["notes"] = e.notes;
  j["warnings"] = e.warnings;
  return detail::dump_json(j, 2) + "\n";
}

namespace {

// "32 x 4096, MoE 8 of 128, tied": layers x hidden, then what decides the trainable layout.
std::string preset_layout(const PresetInfo& p) {
  std::string out = fmt::format("{} x {}", p.layers, p.hidden);
  if (p.state_space) out += ", state-space";
  if (p.experts > 0) out += fmt::format(", MoE {} of {}", p.experts_per_token, p.experts);
  if (p.tied) out += ", tied";
  return out;
}

}  // namespace

std::string render_models_table(const std::vector<PresetInfo>& presets) {
  std::string out = fmt::format("{:<24} {:<38} {:<12} {:>18} {:>18}  {}\n", "model", "hub id",
                                "family", "parameters", "active per token", "layers x hidden");
  for (const auto& p : presets) {
    out += fmt::format("{:<24} {:<38} {:<12} {:>18} {:>18}  {}\n", p.name, p.hub_id, p.family,
                       format_count(p.params), format_count(p.active_params), preset_layout(p));
  }
  return out;
}

std::string render_models_json(const std::vector<PresetInfo>& presets) {
  ordered_json list = ordered_json::array();
  for (const auto& p : presets) {
    list.push_back({{"name", p.name},
                    {"hub_id", p.hub_id},
                    {"family", p.family},
                    {"params", p.params},
                    {"active_params", p.active_params},
                    {"layers", p.layers},
                    {"hidden_size", p.hidden},
                    {"experts", p.experts},
                    {"experts_per_token", p.experts_per_token},
                    {"tied_embeddings", p.tied}});
  }
  ordered_json j = {{"schema_version", kJsonSchemaVersion}, {"models", list}};
  return detail::dump_json(j, 2) + "\n";
}

std::string render_gpus_table(const std::vector<Gpu>& gpus, Unit unit) {
  std::string out =
      fmt::format("{:<14} {:>12} {:>12}  {:<9}  {}\n", "gpu", "capacity", "", "source", "device");
  for (const auto& g : gpus) {
    out += fmt::format("{:<14} {:>12} {:>12}  {:<9}  {}\n", g.name, format_bytes(g.capacity, unit),
                       format_bytes(g.capacity, Unit::GiB), g.source, g.label);
  }
  out +=
      fmt::format("default reserve {} per device for the CUDA context and workspaces (--reserve)\n",
                  format_bytes(kDefaultReserve, Unit::GiB));
  return out;
}

std::string render_gpus_json(const std::vector<Gpu>& gpus) {
  ordered_json list = ordered_json::array();
  for (const auto& g : gpus) {
    list.push_back({{"name", g.name},
                    {"label", g.label},
                    {"capacity_bytes", g.capacity},
                    {"source", g.source}});
  }
  ordered_json j = {{"schema_version", kJsonSchemaVersion},
                    {"default_reserve_bytes", kDefaultReserve},
                    {"gpus", list}};
  return detail::dump_json(j, 2) + "\n";
}

namespace {

std::string_view status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::fits:
      return "fits";
    case CheckStatus::over:
      return "over";
    case CheckStatus::invalid:
      return "invalid";
  }
  return "invalid";
}

}  // namespace

std::string render_check_table(const std::vector<CheckResult>& results, Unit unit) {
  std::string out;
  std::size_t counts[3] = {0, 0, 0};
  for (const auto& r : results) {
    ++counts[static_cast<std::size_t>(r.status)];
    if (r.status == CheckStatus::invalid) {
      for (std::string_view p : r.problems) {
        if (p.starts_with(r.file + ": ")) p.remove_prefix(r.file.size() + 2);  // named already
        out += fmt::format("{}: invalid: {}\n", r.file, p);
      }
      continue;
    }
    const auto& c = *r.check;
    const std::string verdict =
        c.fits ? fmt::format("fits, headroom {}", format_bytes(c.headroom, unit))
               : fmt::format("over by {}", format_bytes(c.over, unit));
    out += fmt::format("{}: {}: needs {} of {} usable on {}{}\n", r.file, verdict,
                       format_bytes(c.need, unit), format_bytes(c.usable, unit),
                       budget_label(*r.budget, unit),
                       r.activations_estimated ? "" : " (activations not estimated)");
  }
  out += fmt::format("{} fit, {} over, {} invalid\n", counts[0], counts[1], counts[2]);
  return out;
}

std::string render_check_json(const std::vector<CheckResult>& results) {
  ordered_json list = ordered_json::array();
  std::size_t counts[3] = {0, 0, 0};
  for (const auto& r : results) {
    ++counts[static_cast<std::size_t>(r.status)];
    ordered_json j = {{"file", r.file}, {"status", status_name(r.status)}};
    if (r.check) {
      j["need_bytes"] = r.check->need;
      j["usable_bytes"] = r.check->usable;
      j["headroom_bytes"] = r.check->headroom;
      j["over_bytes"] = r.check->over;
      j["budget"] = {{"source", r.budget->source},
                     {"capacity_bytes", r.budget->capacity},
                     {"reserve_bytes", r.budget->reserve}};
      j["activations_estimated"] = r.activations_estimated;
    }
    j["problems"] = r.problems;
    list.push_back(j);
  }
  ordered_json j = {
      {"schema_version", kJsonSchemaVersion},
      {"results", list},
      {"summary", {{"fits", counts[0]}, {"over", counts[1]}, {"invalid", counts[2]}}}};
  return detail::dump_json(j, 2) + "\n";
}

namespace {

// A policy against the budget: its headroom, or how far over it is; empty without a budget.
std::string budget_cell(const Estimate& e, Unit unit) {
  if (!e.budget) return "";
  return e.budget->fits ? format_bytes(e.budget->headroom, unit)
                        : fmt::format("over by {}", format_bytes(e.budget->over, unit));
}

std::string signed_bytes(std::uint64_t value, std::uint64_t base, Unit unit) {
  if (value == base) return "0";
  const bool up = value > base;
  const std::uint64_t diff = up ? value - base : base - value;
  const double pct = base ? 100.0 * static_cast<double>(diff) / static_cast<double>(base) : 0.0;
  return fmt::format("{}{} ({}{:.0f}%)", up ? "+" : "-", format_bytes(diff, unit), up ? "+" : "-",
                     pct);
}

}  // namespace

namespace {

// The comparison's rows (a label, one cell per policy) and the lines under them, which the
// table and the Markdown lay out each their own way.
struct CompareGrid {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  std::vector<std::string> notes;
};

CompareGrid compare_grid(const std::vector<RunSpec>& runs, const std::vector<Estimate>& estimates,
                         Unit unit) {
  CompareGrid g;
  const auto row = [&](std::string label, const auto& cell) {
    std::vector<std::string> cells;
    cells.reserve(estimates.size());
    for (const auto& e : estimates) cells.push_back(cell(e));
    g.rows.emplace_back(std::move(label), std::move(cells));
  };
  for (std::size_t i = 0; i < estimates.front().categories.size(); ++i) {
    const auto& first = estimates.front().categories[i];
    if (!first.on_device) continue;
    row(std::string(first.label), [&](const Estimate& e) {
      const auto& c = e.categories[i];
      std::string cell = size_cell(c, unit);
      return c.dtype && c.bytes && *c.bytes > 0 ? fmt::format("{} {}", dtype_name(*c.dtype), cell)
                                                : cell;
    });
  }
  row("sum of categories", [&](const Estimate& e) { return format_bytes(e.total_bytes, unit); });
  const bool peaks = estimates.front().peak.has_value();
  if (peaks)
    row("peak over a step", [&](const Estimate& e) { return format_bytes(e.peak->bytes, unit); });
  // The comparison that matters: what each policy needs, against the first column.
  auto need = [&](const Estimate& e) { return peaks ? e.peak->needed : e.total_bytes; };
  row(fmt::format("{} vs {}", peaks ? "peak" : "sum", runs.front().precision.name),
      [&](const Estimate& e) { return signed_bytes(need(e), need(estimates.front()), unit); });
  if (const auto& budget = runs.front().budget) {  // each policy against the budget
    row(fmt::format("headroom on {}", budget_label(*budget, unit)),
        [&](const Estimate& e) { return budget_cell(e, unit); });
  }
  if (!estimates.front().total_complete) {
    g.notes.push_back("activations not estimated: give --batch and --seq for the peak");
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Estimate& e = estimates[i];
    // Said where it matters: a hundredth of the peak or more.
    if (!e.peak || e.peak_outside_rows.empty() || e.peak_outside_rows_bytes * 100 < e.peak->bytes)
      continue;
    g.notes.push_back(
        fmt::format("{}: the peak holds {} that no row has, largest {} {}", runs[i].precision.name,
                    format_bytes(e.peak_outside_rows_bytes, unit), e.peak_outside_rows.front().name,
                    format_bytes(e.peak_outside_rows.front().bytes, unit)));
  }
  return g;
}

}  // namespace

std::string render_compare_table(const std::vector<RunSpec>& runs,
                                 const std::vector<Estimate>& estimates, Unit unit) {
  const CompareGrid g = compare_grid(runs, estimates, unit);
  // Columns at least two spaces apart, however long a policy's name or a cell.
  int width = 18;
  for (const auto& r : runs) width = std::max(width, static_cast<int>(r.precision.name.size()) + 2);
  for (const auto& [label, cells] : g.rows) {
    if (label.starts_with("headroom on ")) {
      for (const auto& c : cells) width = std::max(width, static_cast<int>(c.size()) + 2);
    }
  }
  std::string out = model_line(runs.front(), estimates.front()) + "\n";
  out += fmt::format("optimizer  {}\n\n", optimizer_name(runs.front().optimizer.kind));
  out += fmt::format("{:<26}", "category");
  for (const auto& r : runs) out += fmt::format("{:>{}}", r.precision.name, width);
  out += "\n";
  for (const auto& [label, cells] : g.rows) {
    out += fmt::format("{:<26}", label);
    for (const auto& c : cells) out += fmt::format("{:>{}}", c, width);
    out += "\n";
  }
  for (const auto& n : g.notes) out += n + "\n";
  return out;
}

namespace {

// Lines joined by "; ", for a Markdown heading.
std::string one_line(std::string text) {
  for (std::size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at)) {
    text.replace(at, 1, "; ");
  }
  return text;
}

}  // namespace

std::string render_compare_markdown(const std::vector<RunSpec>& runs,
                                    const std::vector<Estimate>& estimates, Unit unit) {
  const CompareGrid g = compare_grid(runs, estimates, unit);
  std::string out = fmt::format("**{}**, optimizer `{}`\n\n| category |",
                                one_line(model_line(runs.front(), estimates.front()).substr(11)),
                                optimizer_name(runs.front().optimizer.kind));
  std::string rule = "|---|";
  for (const auto& r : runs) {
    out += fmt::format(" {} |", r.precision.name);
    rule += "---:|";
  }
  out += "\n" + rule + "\n";
  for (const auto& [label, cells] : g.rows) {
    out += fmt::format("| {} | {} |\n", label, fmt::join(cells, " | "));
  }
  if (!g.notes.empty()) out += "\n";
  for (const auto& n : g.notes) out += n + "\n";
  return out;
}

std::string render_compare_json(const std::vector<RunSpec>& runs,
                                const std::vector<Estimate>& estimates) {
  ordered_json list = ordered_json::array();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    ordered_json cats = ordered_json::object();
    for (const auto& c : estimates[i].categories) {
      cats[c.key] = c.bytes ? ordered_json(*c.bytes) : ordered_json(nullptr);
    }
    list.push_back({{"precision", precision_json(runs[i].precision)},
                    {"categories_bytes", cats},
                    {"total_bytes", estimates[i].total_bytes},
                    {"total_complete", estimates[i].total_complete},
                    {"peak_bytes", estimates[i].peak ? ordered_json(estimates[i].peak->bytes)
                                                     : ordered_json(nullptr)}});
    if (const auto& b = estimates[i].budget) {
      list.back()["budget"] = {{"need_bytes", b->need},
                               {"fits", b->fits},
                               {"headroom_bytes", b->headroom},
                               {"over_bytes", b->over}};
    }
  }
  ordered_json j = {{"schema_version", kJsonSchemaVersion},
                    {"model", runs.front().model.name},
                    {"optimizer", optimizer_json(runs.front().optimizer)},
                    {"runs", list}};
  if (const auto& b = runs.front().budget) {
    j["budget"] = {{"source", b->source},
                   {"capacity_bytes", b->capacity},
                   {"reserve_bytes", b->reserve},
                   {"usable_bytes", b->usable()}};
  }
  return detail::dump_json(j, 2) + "\n";
}

}  // namespace memest
