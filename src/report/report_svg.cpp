// SVG pictures (--plot): live memory over a training step stacked by part (Peak::timeline), and
// a sweep's need against the micro-batch or the sequence length. Plain SVG text: the numbers
// are the estimate's; the only arithmetic here is the geometry. Each drawn series carries its
// bytes as a data- attribute, so a test can check the picture against the numbers.
#include "report/svg_parts.hpp"

#include <memest/error.hpp>
#include <memest/peak.hpp>
#include <memest/report.hpp>
#include <memest/step.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace memest {
namespace {

// A part's colour as every output draws it (src/step/memory_kinds.cpp); one per sweep series.
std::string part_colour(std::size_t part) {
  return svg::colour(part_kind(static_cast<Part>(part)).colour);
}
constexpr std::array<std::string_view, 10> kSeriesColors = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string header(std::string_view title, std::string_view subtitle, const svg::Axis& axis) {
  return svg::page(svg::kHeight,
                   fmt::format("data-y-top=\"{}\" data-y-bottom=\"{}\" data-axis-bytes=\"{:.0f}\"",
                               svg::kTop, svg::kTop + svg::kPlotH, axis.max_bytes),
                   title, subtitle);
}

std::string y_ticks(const svg::Axis& axis, Unit unit) {
  std::string out;
  svg::for_each_tick(axis, [&](u64 bytes) {
    const double y = axis.y(bytes);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" y2=\"{1:.2f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\">{5}</text>\n",
        svg::kLeft, y, svg::kLeft + svg::kPlotW, svg::kLeft - 6, y + 4,
        svg::esc(format_bytes(bytes, unit)));
  });
  return out;
}

// Where a level's label sits, its baseline: above its line, 5 px up.
double level_label_y(u64 bytes, const svg::Axis& axis) { return axis.y(bytes) - 5; }

// A horizontal line across the plot at `bytes`, labelled at its right end (baseline `label_y`).
std::string level(std::string_view cls, u64 bytes, const svg::Axis& axis, std::string_view label,
                  std::string_view dash, double label_y) {
  const double y = axis.y(bytes);
  return fmt::format(
      "<line class=\"{0}\" data-bytes=\"{1}\" x1=\"{2}\" y1=\"{3:.2f}\" x2=\"{4}\" "
      "y2=\"{3:.2f}\" stroke=\"#c00\" stroke-width=\"1.5\" stroke-dasharray=\"{5}\"/>"
      "<text x=\"{4}\" y=\"{6:.2f}\" text-anchor=\"end\" fill=\"#c00\">{7}</text>\n",
      cls, bytes, svg::kLeft, y, svg::kLeft + svg::kPlotW, dash, label_y, svg::esc(label));
}

// The budget's usable bytes as a dashed level, when the run has a budget.
std::string budget_level(const RunSpec& run, const svg::Axis& axis, Unit unit) {
  if (!run.budget) return "";
  const u64 usable = run.budget->usable();
  return level(
      "budget", usable, axis,
      fmt::format("{}: {} usable", budget_label(*run.budget, unit), format_bytes(usable, unit)),
      "6 4", level_label_y(usable, axis));
}

double step_x(std::size_t i, std::size_t n) {
  return svg::kLeft + (static_cast<double>(i) + 0.5) * svg::kPlotW / static_cast<double>(n);
}

// Phase labels run at -30 degrees: two of them clear each other's text boxes when their anchors
// are a box's height apart across the slant: a 12 px font's box is about 1.2 em (ascent and
// descent, 14.4 px) tall, so 14.4 / sin(30 deg) = 28.8 px apart; 30 leaves a margin.
constexpr double kPhaseLabelGap = 30;

// Background bands for the phases of the timeline, each labelled below the axis; a label too
// close to the one before moves right, with a leader line to its band.
std::string phase_bands(const std::vector<Moment>& tl) {
  std::string out;
  const double slot = svg::kPlotW / static_cast<double>(tl.size());
  double last_label = -kPhaseLabelGap;
  for (std::size_t i = 0, band = 0; i < tl.size(); ++band) {
    std::size_t j = i;
    while (j < tl.size() && phase_of(tl[j].id.kind) == phase_of(tl[i].id.kind)) ++j;
    const double x0 = svg::kLeft + static_cast<double>(i) * slot;
    const double x1 = svg::kLeft + static_cast<double>(j) * slot;
    const double mid = (x0 + x1) / 2, base = svg::kTop + svg::kPlotH + 16;
    const double x = std::max(mid, last_label + kPhaseLabelGap);
    last_label = x;
    out += fmt::format(
        "<rect class=\"phase\" x=\"{0:.2f}\" y=\"{1}\" width=\"{2:.2f}\" height=\"{3}\" "
        "fill=\"{4}\"/><text class=\"phase-label\" x=\"{5:.2f}\" y=\"{6}\" "
        "text-anchor=\"end\" transform=\"rotate(-30 {5:.2f} {6})\">{7}</text>\n",
        x0, svg::kTop, x1 - x0, svg::kPlotH, band % 2 ? "#f4f4f4" : "#fafafa", x, base,
        svg::esc(tl[i].phase));
    if (x != mid) {
      out +=
          fmt::format("<line x1=\"{:.2f}\" y1=\"{}\" x2=\"{:.2f}\" y2=\"{}\" stroke=\"#999\"/>\n",
                      mid, svg::kTop + svg::kPlotH, x, base - 10);
    }
    i = j;
  }
  return out;
}

// The parts stacked, one polygon each (bottom to top in part order), and the total on top.
std::string stacks(const std::vector<Moment>& tl, const svg::Axis& axis) {
  std::string out;
  const std::size_t n = tl.size();
  std::vector<u64> below(n, 0);
  for (std::size_t p = 0; p < kPartCount; ++p) {
    if (std::none_of(tl.begin(), tl.end(), [&](const Moment& m) { return m.parts[p] > 0; }))
      continue;
    std::string top, bottom, bytes;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t r = n - 1 - i;
      top += fmt::format("{:.2f},{:.2f} ", step_x(i, n), axis.y(below[i] + tl[i].parts[p]));
      bottom += fmt::format("{:.2f},{:.2f} ", step_x(r, n), axis.y(below[r]));
      bytes += fmt::format("{}{}", i ? " " : "", tl[i].parts[p]);
    }
    for (std::size_t i = 0; i < n; ++i) below[i] += tl[i].parts[p];
    out += fmt::format(
        "<polygon class=\"part\" data-part=\"{}\" data-bytes=\"{}\" fill=\"{}\" "
        "points=\"{}{}\"/>\n",
        part_name(static_cast<Part>(p)), bytes, part_colour(p), top, bottom);
  }
  std::string points, bytes;
  for (std::size_t i = 0; i < n; ++i) {
    points += fmt::format("{}{:.2f},{:.2f}", i ? " " : "", step_x(i, n), axis.y(tl[i].bytes));
    bytes += fmt::format("{}{}", i ? " " : "", tl[i].bytes);
  }
  return out + fmt::format(
                   "<polyline class=\"total\" data-bytes=\"{}\" points=\"{}\" fill=\"none\" "
                   "stroke=\"#222\" stroke-width=\"1\"/>\n",
                   bytes, points);
}

std::string moment_label(const Moment& m) {
  return m.layer >= 0 ? fmt::format("{}, layer {}", m.name, m.layer) : std::string(m.name);
}

// The first of `candidates` (baselines) a text box's height from every label in `taken`.
double clear_of(std::initializer_list<double> candidates, const std::vector<double>& taken) {
  for (const double y : candidates) {
    if (std::all_of(taken.begin(), taken.end(),
                    [&](double t) { return std::abs(t - y) >= svg::kTextBox; }))
      return y;
  }
  return *candidates.begin();
}

// The peak's dot and its label: above the dot, or below it where a level's label (`taken`, their
// baselines) would be within a text box's height.
std::string peak_marker(const std::vector<Moment>& tl, std::size_t k, const svg::Axis& axis,
                        Unit unit, const std::vector<double>& taken) {
  const double x = step_x(k, tl.size()), y = axis.y(tl[k].bytes);
  const bool right = x < svg::kLeft + svg::kPlotW / 2;
  const double label_y =
      clear_of({y - 8, y + 20, y - 8 - svg::kTextBox, y + 20 + svg::kTextBox}, taken);
  return fmt::format(
      "<circle class=\"peak\" data-bytes=\"{0}\" data-index=\"{1}\" cx=\"{2:.2f}\" "
      "cy=\"{3:.2f}\" r=\"5\" fill=\"#c00\" stroke=\"white\"/>"
      "<text x=\"{4:.2f}\" y=\"{5:.2f}\" text-anchor=\"{6}\" font-weight=\"bold\">"
      "peak {7} at {8}</text>\n",
      tl[k].bytes, k, x, y, right ? x + 8 : x - 8, label_y, right ? "start" : "end",
      svg::esc(format_bytes(tl[k].bytes, unit)), svg::esc(moment_label(tl[k])));
}

std::string run_subtitle(const RunSpec& run, const Estimate& est) {
  std::string s =
      fmt::format("micro-batch {}, sequence {}, {}, {}", run.training.micro_batch,
                  run.training.seq_len, run.precision.name, optimizer_name(run.optimizer.kind));
  if (!est.stages.empty()) {
    s += fmt::format(", pipeline stage {} of {} (the largest)", est.worst_stage, est.stages.size());
  }
  return s;
}

// One stage's line over the steps of its schedule, a step a slot of the widest schedule.
std::string stage_line(const StageSummary& st, std::size_t slots, std::string_view color,
                       const svg::Axis& axis) {
  std::string points, bytes;
  const auto& v = st.schedule_bytes;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double x0 =
        svg::kLeft + static_cast<double>(i) * svg::kPlotW / static_cast<double>(slots);
    const double x1 =
        svg::kLeft + static_cast<double>(i + 1) * svg::kPlotW / static_cast<double>(slots);
    points += fmt::format("{}{:.2f},{:.2f} {:.2f},{:.2f}", i ? " " : "", x0, axis.y(v[i]), x1,
                          axis.y(v[i]));
    bytes += fmt::format("{}{}", i ? " " : "", v[i]);
  }
  return fmt::format(
      "<polyline class=\"stage\" data-stage=\"{}\" data-bytes=\"{}\" points=\"{}\" "
      "fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
      st.stage, bytes, points, color);
}

std::string schedule_ticks(std::size_t slots) {
  std::string out;
  const std::size_t every = slots > 16 ? (slots + 15) / 16 : 1;
  for (std::size_t i = 0; i < slots; i += every) {
    const double x = step_x(i, slots);
    out += fmt::format("<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x,
                       svg::kTop + svg::kPlotH + 18, i + 1);
  }
  return out + fmt::format("<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           svg::kLeft + svg::kPlotW / 2, svg::kTop + svg::kPlotH + 44,
                           "step of the stage's schedule (a forward or a backward of one "
                           "micro-batch and chunk)");
}

// A pipeline: each stage's live bytes over the steps of its schedule (StageSummary's series).
std::string render_schedule_svg(const RunSpec& run, const Estimate& est,
                                const ReportOptions& options) {
  std::size_t slots = 1;
  u64 top = run.budget ? run.budget->usable() : 0;
  for (const StageSummary& st : est.stages) {
    slots = std::max(slots, st.schedule_bytes.size());
    for (const u64 b : st.schedule_bytes) top = std::max(top, b);
  }
  const svg::Axis axis = svg::axis_for(top, options.unit);
  const auto& s0 = est.stages.front();
  std::string svg = header(
      fmt::format("{}: live memory per pipeline stage over the step", run.model.name),
      fmt::format("{} stages, {}, {} micro-batches; each stage's largest moment with the "
                  "micro-batches it holds at each step",
                  est.stages.size(), pipe_schedule_names()[static_cast<std::size_t>(s0.schedule)],
                  run.parallel.microbatches ? run.parallel.microbatches : run.training.grad_accum),
      axis);
  svg += y_ticks(axis, options.unit) + schedule_ticks(slots);
  for (std::size_t i = 0; i < est.stages.size(); ++i) {
    const StageSummary& st = est.stages[i];
    const auto color = kSeriesColors[i % kSeriesColors.size()];
    svg += stage_line(st, slots, color, axis);
    const u64 most = *std::max_element(st.schedule_bytes.begin(), st.schedule_bytes.end());
    if (i < 20)
      svg += svg::legend_row(
          i, color,
          fmt::format("stage {}: at most {}", st.stage, format_bytes(most, options.unit)));
  }
  return svg + budget_level(run, axis, options.unit) + "</svg>\n";
}

}  // namespace

std::string render_step_svg(const RunSpec& run, const Estimate& est, const ReportOptions& options) {
  const bool pipeline = est.stages.size() > 1 &&
                        std::all_of(est.stages.begin(), est.stages.end(),
                                    [](const auto& st) { return !st.schedule_bytes.empty(); });
  if (pipeline) return render_schedule_svg(run, est, options);
  if (!est.peak || est.peak->timeline.empty()) {
    throw Error("--plot: the step is walked only for a whole run: give --batch and --seq");
  }
  const Peak& pk = *est.peak;
  const auto& tl = pk.timeline;
  const Moment& top = tl[pk.timeline_peak];
  const u64 usable = run.budget ? run.budget->usable() : 0;
  const svg::Axis axis = svg::axis_for(std::max({top.bytes, usable, pk.needed}), options.unit);
  std::string svg = header(fmt::format("{}: live memory over one training step", run.model.name),
                           run_subtitle(run, est), axis);
  svg += phase_bands(tl) + y_ticks(axis, options.unit) + stacks(tl, axis);
  svg += budget_level(run, axis, options.unit);
  // The levels' labels at the plot's right end: the device's need below its line where the
  // budget's label is within a text box's height; the peak's label clear of both.
  std::vector<double> taken;
  if (run.budget) taken.push_back(level_label_y(run.budget->usable(), axis));
  if (pk.needed != top.bytes) {
    const double above = level_label_y(pk.needed, axis);
    taken.push_back(clear_of({above, axis.y(pk.needed) + 14}, taken));
    svg += level(
        "needed", pk.needed, axis,
        fmt::format("device needs {} (allocator, context)", format_bytes(pk.needed, options.unit)),
        "2 3", taken.back());
  }
  svg += peak_marker(tl, pk.timeline_peak, axis, options.unit, taken);
  std::size_t row = 0;
  for (std::size_t p = kPartCount; p-- > 0;) {  // the legend in stacking order, top first
    if (std::none_of(tl.begin(), tl.end(), [&](const Moment& m) { return m.parts[p] > 0; }))
      continue;
    svg += svg::legend_row(row++, part_colour(p),
                           fmt::format("{} {}", part_label(static_cast<Part>(p)),
                                       format_bytes(top.parts[p], options.unit)));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{:.2f}\" fill=\"#555\">(bytes at the peak)</text>\n",
                     svg::kLeft + svg::kPlotW + 16, svg::kTop + 10 + 20 * static_cast<double>(row));
  return svg + "</svg>\n";
}

namespace {

// What a sweep's rows are drawn against, and what tells their lines apart.
struct SweepAxes {
  bool by_batch = true;
  bool policies = false, optimizers = false, other_size = false;
};

template <typename F>
bool varies(const std::vector<SweepRow>& rows, F field) {
  return std::any_of(rows.begin(), rows.end(),
                     [&](const SweepRow& r) { return field(r) != field(rows.front()); });
}

SweepAxes sweep_axes(const std::vector<SweepRow>& rows) {
  SweepAxes a;
  const bool batches = varies(rows, [](const SweepRow& r) { return r.micro_batch; });
  const bool seqs = varies(rows, [](const SweepRow& r) { return r.seq_len; });
  if (!batches && !seqs) {
    throw Error("--plot: a sweep picture needs two or more values of --batches or --seqs");
  }
  a.by_batch = batches;
  a.other_size = batches && seqs;
  a.policies = varies(rows, [](const SweepRow& r) { return r.precision; });
  a.optimizers = varies(rows, [](const SweepRow& r) { return r.optimizer; });
  return a;
}

std::string series_label(const SweepRow& r, const SweepAxes& a) {
  std::string label = a.policies || !a.optimizers ? r.precision : "";
  // fmt rather than string operator+: GCC 12 at -O3 warns falsely on the latter (-Wrestrict,
  // GCC bug 105329).
  if (a.optimizers)
    label += fmt::format("{}{}", label.empty() ? "" : " ", optimizer_name(r.optimizer));
  if (a.other_size) label += fmt::format(" seq {}", r.seq_len);
  return label;
}

struct Series {
  std::string label;
  std::vector<std::pair<u64, u64>> points;  // (batch or sequence, need)
};

std::vector<Series> sweep_series(const std::vector<SweepRow>& rows, const SweepAxes& a) {
  std::vector<Series> out;
  for (const SweepRow& r : rows) {
    const std::string label = series_label(r, a);
    auto it =
        std::find_if(out.begin(), out.end(), [&](const Series& s) { return s.label == label; });
    if (it == out.end()) it = out.insert(out.end(), Series{label, {}});
    it->points.emplace_back(a.by_batch ? r.micro_batch : r.seq_len, r.need);
  }
  for (Series& s : out) std::sort(s.points.begin(), s.points.end());
  return out;
}

// The x axis of a sweep: logarithmic when the sizes span a factor of 8 or more.
struct XAxis {
  double lo = 0, hi = 1;
  bool log = false;
  double x(u64 v) const {
    const double t = log ? std::log2(static_cast<double>(v)) : static_cast<double>(v);
    return svg::kLeft + 20 + (hi > lo ? (t - lo) / (hi - lo) : 0.5) * (svg::kPlotW - 40);
  }
};

std::string x_ticks(const std::vector<u64>& values, const XAxis& xa, std::string_view name) {
  std::string out;
  const std::size_t every = values.size() > 12 ? (values.size() + 11) / 12 : 1;
  for (std::size_t i = 0; i < values.size(); i += every) {
    const double x = xa.x(values[i]);
    out += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, svg::kTop, svg::kTop + svg::kPlotH, svg::kTop + svg::kPlotH + 18, values[i]);
  }
  return out + fmt::format("<text x=\"{:.2f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           svg::kLeft + svg::kPlotW / 2, svg::kTop + svg::kPlotH + 44, name);
}

std::string series_svg(const Series& s, std::string_view color, const XAxis& xa,
                       const svg::Axis& axis) {
  std::string points, xs, bytes, dots;
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    const auto [v, need] = s.points[i];
    const double x = xa.x(v), y = axis.y(need);
    points += fmt::format("{}{:.2f},{:.2f}", i ? " " : "", x, y);
    xs += fmt::format("{}{}", i ? " " : "", v);
    bytes += fmt::format("{}{}", i ? " " : "", need);
    dots += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>", x, y, color);
  }
  return fmt::format(
      "<polyline class=\"series\" data-label=\"{}\" data-x=\"{}\" data-bytes=\"{}\" "
      "points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>{}\n",
      svg::esc(s.label), xs, bytes, points, color, dots);
}

}  // namespace

std::string render_sweep_svg(const RunSpec& run, const std::vector<SweepRow>& rows,
                             const ReportOptions& options) {
  if (rows.empty()) throw Error("--plot: the sweep has no rows");
  const SweepAxes a = sweep_axes(rows);
  const auto series = sweep_series(rows, a);
  std::vector<u64> values;
  u64 top = run.budget ? run.budget->usable() : 0;
  for (const SweepRow& r : rows) {
    values.push_back(a.by_batch ? r.micro_batch : r.seq_len);
    top = std::max(top, r.need);
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  XAxis xa;
  xa.log = values.back() >= 8 * values.front();
  xa.lo =
      xa.log ? std::log2(static_cast<double>(values.front())) : static_cast<double>(values.front());
  xa.hi =
      xa.log ? std::log2(static_cast<double>(values.back())) : static_cast<double>(values.back());
  const svg::Axis axis = svg::axis_for(top, options.unit);
  std::string svg = header(
      fmt::format("{}: memory needed per device", run.model.name),
      fmt::format("against the {}, one line per {}", a.by_batch ? "micro-batch" : "sequence length",
                  a.optimizers && !a.policies ? "optimizer" : "policy"),
      axis);
  svg += y_ticks(axis, options.unit) +
         x_ticks(values, xa, a.by_batch ? "micro-batch" : "sequence length");
  for (std::size_t i = 0; i < series.size(); ++i) {
    const auto color = kSeriesColors[i % kSeriesColors.size()];
    svg += series_svg(series[i], color, xa, axis);
    if (i < 20) svg += svg::legend_row(i, color, series[i].label);
  }
  return svg + budget_level(run, axis, options.unit) + "</svg>\n";
}

}  // namespace memest
