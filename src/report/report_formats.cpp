// The chart and the Markdown rendering of an estimate.
#include "report/report_text.hpp"

#include <memest/check.hpp>
#include <memest/peak.hpp>
#include <memest/report.hpp>
#include <memest/step.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace memest {
namespace {

constexpr int kBarWidth = 60;

// Without colour, one glyph per segment in the order they appear; with colour, each kind's own
// (src/step/memory_kinds.cpp, as the pictures and the web page draw it) in 24-bit escapes.
constexpr std::array<std::string_view, 6> kGlyphs = {"█", "▓", "▒", "░", "▚", "▞"};
constexpr std::string_view kReset = "\x1b[0m";

struct Segment {
  const MemoryKind* kind;
  std::string_view label;
  std::uint64_t bytes;
};

std::string colour_cell(const MemoryKind& k) {
  return fmt::format("\x1b[38;2;{};{};{}m█{}", k.colour >> 16, (k.colour >> 8) & 0xff,
                     k.colour & 0xff, kReset);
}

// What is live at the peak when it is modelled, else the device categories.
std::vector<Segment> segments(const Estimate& est) {
  std::vector<Segment> out;
  if (est.peak) {
    const auto& m = est.peak->peak_moment();
    for (std::size_t i = 0; i < kPartCount; ++i) {
      // Parts under 0.1% (input ids, buffers) would not show; the table lists them exactly.
      if (m.parts[i] * 1000 < m.bytes) continue;
      const MemoryKind& k = part_kind(static_cast<Part>(i));
      out.push_back({&k, k.label, m.parts[i]});
    }
    if (est.peak->needed > m.bytes) {
      const MemoryKind& k = allocator_slack_kind();
      out.push_back({&k, k.label, est.peak->needed - m.bytes});
    }
    return out;
  }
  for (const auto& c : est.categories) {
    if (c.on_device && c.bytes && *c.bytes > 0)
      out.push_back({&category_kind(c.key), c.label, *c.bytes});
  }
  return out;
}

}  // namespace

std::string render_bar(const Estimate& est, const std::optional<Budget>& budget,
                       const ReportOptions& options) {
  const auto segs = segments(est);
  const std::uint64_t need = bytes_needed(est);
  const std::uint64_t usable = budget ? budget->usable() : 0;
  const std::uint64_t scale = std::max<std::uint64_t>({need, usable, 1});
  auto columns = [&](std::uint64_t bytes) {
    return static_cast<int>(
        std::lround(static_cast<double>(bytes) / static_cast<double>(scale) * kBarWidth));
  };
  // One string per column, so the budget mark can go inside the bar when the need exceeds it.
  std::vector<std::string> cells;
  std::string legend;
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const int n = std::max(1, columns(segs[i].bytes));
    const std::string cell =
        options.color ? colour_cell(*segs[i].kind) : std::string(kGlyphs[i % kGlyphs.size()]);
    for (int c = 0; c < n; ++c) cells.push_back(cell);
    legend += fmt::format("{}{} {} {}", legend.empty() ? "" : "  ", cell, segs[i].label,
                          format_bytes(segs[i].bytes, options.unit));
  }
  if (budget) {
    const auto mark = static_cast<std::size_t>(columns(usable));
    if (cells.size() < mark) cells.resize(mark, " ");
    cells.insert(cells.begin() + static_cast<std::ptrdiff_t>(mark), "│");
  }
  std::string bar;
  for (const auto& c : cells) bar += c;
  std::string out = "\n";
  if (budget && est.budget) {
    const auto& check = *est.budget;
    out += fmt::format("{}  {} of {} usable on {}: {}\n", bar, format_bytes(need, options.unit),
                       format_bytes(usable, options.unit), budget_label(*budget, options.unit),
                       check.fits
                           ? fmt::format("headroom {}", format_bytes(check.headroom, options.unit))
                           : fmt::format("over by {}", format_bytes(check.over, options.unit)));
  } else {
    out += fmt::format("{}  {}\n", bar, format_bytes(need, options.unit));
  }
  out += legend + "\n";
  return out;
}

std::string render_markdown(const RunSpec& run, const Estimate& est, const ReportOptions& options) {
  const Unit unit = options.unit;
  std::string out =
      fmt::format("**{}**: {} parameters, optimizer `{}`, precision `{}`\n\n", run.model.name,
                  format_count(est.params), optimizer_name(run.optimizer.kind), run.precision.name);
  out += "| category | dtype | B/param | size | basis |\n|---|---|---:|---:|---|\n";
  for (const auto& c : est.categories) {
    std::string size = c.bytes ? (*c.bytes ? format_bytes(*c.bytes, unit) : "-") : "not estimated";
    if (!c.on_device && c.bytes && *c.bytes) size += c.unified ? " (unified)" : " (host)";
    out += fmt::format(
        "| {} | {} | {} | {} | {} |\n", c.label, c.dtype ? dtype_name(*c.dtype) : "-",
        c.bytes && c.elements && c.per_param ? fmt::format("{:.2f}", c.bytes_per_element()) : "-",
        size, c.basis);
  }
  // The totals under the table's own labels; the peak, the stages and every note as it prints
  // them.
  out += fmt::format("| **{}** | | | **{}** | |\n", total_label(est),
                     format_bytes(est.total_bytes, unit));
  if (const auto host = est.host_bytes; host * 100 >= unit_bytes(unit)) {
    out += fmt::format("| host memory (rows marked host) | | | {} | |\n", format_bytes(host, unit));
  }
  if (est.unified_bytes > 0) {
    out += fmt::format("| unified memory (paged, not in the peak) | | | {} | |\n",
                       format_bytes(est.unified_bytes, unit));
  }
  if (const std::string rest = render_peak_and_notes(run, est, unit); !rest.empty()) {
    out += "\n```text\n" + rest + "```\n";
  }
  if (run.budget && est.budget) {
    const auto& c = *est.budget;
    out += fmt::format("\nBudget: {} of {} usable on {}: {}\n", format_bytes(c.need, unit),
                       format_bytes(c.usable, unit), budget_label(*run.budget, unit),
                       c.fits ? fmt::format("fits, headroom {}", format_bytes(c.headroom, unit))
                              : fmt::format("**over by {}**", format_bytes(c.over, unit)));
  }
  return out;
}

}  // namespace memest
