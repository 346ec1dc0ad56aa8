// `memest serve --plot`: what a device holds as horizontal stacked bars against the memory its
// parts must fit, in the training pictures' page, fonts, palette and units
// (src/report/svg_parts.hpp).
// --fit: one bar per weight format and KV-cache type at its largest value; a plain run: one bar
// per device. The bytes are the result's (ServeFitRow::held, serve_held); the only arithmetic
// here is the geometry. Each bar and part carries its figures as data- attributes.
#include "report/svg_parts.hpp"
#include "serve/serve_render.hpp"

#include <memest/step.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

struct HeldKind {
  std::string_view name;   // data-part
  std::string_view label;  // the legend's words
  std::uint32_t colour;
};

// ServeHeld's kinds in its order: the training parts' colours where the memory is the same
// kind (weights as parameters, the activations, the context's share as allocator and context),
// the KV cache two further colours of the same Tableau 20.
constexpr std::size_t kHeldKinds = 6;
const HeldKind& held_kind(ServeHeld part) {
  static const std::array<HeldKind, kHeldKinds> kinds = {{
      {"weights", "weights", part_kind(Part::params).colour},
      {"activations", "profile-run activation peak", part_kind(Part::activations).colour},
      {"compute_buffer", "compute buffer", part_kind(Part::activations).colour},
      {"non_torch", "non-torch memory", allocator_slack_kind().colour},
      {"kv_cache", "KV cache", 0x499894},
      {"kv_cache_free", "KV cache free at the value", 0x86bcb6},
  }};
  return kinds[static_cast<std::size_t>(part)];
}

// One bar: its label, its value (data-best, empty for a plain run), whether it fits, its parts.
struct HeldBar {
  std::string label;
  std::string best;
  bool fits = true;
  std::vector<ServeHeldPart> parts;
};

// What the bars are drawn against and how the page is titled.
struct HeldPicture {
  std::string title, subtitle;
  std::uint64_t usable = 0;
  std::string usable_label;
  std::vector<HeldBar> bars;
};

constexpr double kSlot = 40;    // a bar's row: its label's line and the bar
constexpr double kBarTop = 18;  // the bar below its label
constexpr double kBarHeight = 20;

std::uint64_t bar_total(const HeldBar& b) {
  std::uint64_t sum = 0;
  for (const ServeHeldPart& p : b.parts) sum += p.bytes;
  return sum;
}

std::string held_ticks(const svg::Axis& axis, double bottom, Unit unit) {
  std::string out;
  svg::for_each_tick(axis, [&](std::uint64_t bytes) {
    out += fmt::format(
        "<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        axis.x(bytes), svg::kTop, bottom, bottom + 18, svg::esc(format_bytes(bytes, unit)));
  });
  return out + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           svg::kLeft + svg::kPlotW / 2, bottom + 40, "memory per device");
}

std::string held_bar(const HeldBar& b, double top, const svg::Axis& axis) {
  std::string out = fmt::format(
      "<g class=\"bar\" data-label=\"{}\" data-best=\"{}\" data-fits=\"{}\"{}>"
      "<text x=\"{}\" y=\"{}\">{}</text>\n",
      svg::esc(b.label), b.best, b.fits ? "true" : "false", b.fits ? "" : " opacity=\"0.5\"",
      svg::kLeft + 2, top + 14, svg::esc(b.label));
  std::uint64_t below = 0;
  for (const ServeHeldPart& p : b.parts) {
    const HeldKind& k = held_kind(p.part);
    const double x0 = axis.x(below), x1 = axis.x(below + p.bytes);
    out += fmt::format(
        "<rect class=\"part\" data-part=\"{}\" data-bytes=\"{}\" x=\"{:.2f}\" y=\"{}\" "
        "width=\"{:.2f}\" height=\"{}\" fill=\"{}\"/>\n",
        k.name, p.bytes, x0, top + kBarTop, x1 - x0, kBarHeight, svg::colour(k.colour));
    below += p.bytes;
  }
  return out + "</g>\n";
}

// The usable memory as a dashed vertical line over the bars, labelled above the plot.
std::string usable_line(const HeldPicture& pic, const svg::Axis& axis, double bottom) {
  const double x = axis.x(pic.usable);
  const bool left = x > svg::kLeft + svg::kPlotW / 2;
  return fmt::format(
      "<line class=\"budget\" data-bytes=\"{0}\" x1=\"{1:.2f}\" y1=\"{2}\" x2=\"{1:.2f}\" "
      "y2=\"{3}\" stroke=\"#c00\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>"
      "<text x=\"{4:.2f}\" y=\"{5}\" text-anchor=\"{6}\" fill=\"#c00\">{7}</text>\n",
      pic.usable, x, svg::kTop - 2, bottom, left ? x - 4 : x + 4, svg::kTop - 6,
      left ? "end" : "start", svg::esc(pic.usable_label));
}

// The kinds some bar has, in ServeHeld's order (the bars' order, left to right).
std::vector<ServeHeld> drawn_kinds(const HeldPicture& pic) {
  std::vector<ServeHeld> out;
  for (std::size_t k = 0; k < kHeldKinds; ++k) {
    const auto part = static_cast<ServeHeld>(k);
    const bool drawn = std::any_of(pic.bars.begin(), pic.bars.end(), [&](const HeldBar& b) {
      return std::any_of(b.parts.begin(), b.parts.end(),
                         [&](const ServeHeldPart& p) { return p.part == part; });
    });
    if (drawn) out.push_back(part);
  }
  return out;
}

std::string held_legend(const HeldPicture& pic) {
  std::string out;
  std::size_t row = 0;
  for (const ServeHeld part : drawn_kinds(pic)) {
    out += svg::legend_row(row++, svg::colour(held_kind(part).colour), held_kind(part).label);
  }
  return out + fmt::format("<text x=\"{}\" y=\"{:.2f}\" fill=\"#555\">(bytes per device)</text>\n",
                           svg::kLeft + svg::kPlotW + 16,
                           svg::kTop + 10 + 20 * static_cast<double>(row));
}

std::string held_svg(const HeldPicture& pic, Unit unit) {
  std::uint64_t top = pic.usable;
  for (const HeldBar& b : pic.bars) top = std::max(top, bar_total(b));
  const svg::Axis axis = svg::axis_for(top, unit);
  // Tall enough for the bars and for the legend beside them (its rows 20 px apart, the note).
  const double legend_h = 20 * static_cast<double>(drawn_kinds(pic).size() + 1);
  const double plot_h = std::max(kSlot * static_cast<double>(pic.bars.size()), legend_h);
  const double bottom = svg::kTop + plot_h;
  std::string out =
      svg::page(bottom + 60,
                fmt::format("data-x-left=\"{}\" data-x-right=\"{}\" data-axis-bytes=\"{:.0f}\"",
                            svg::kLeft, svg::kLeft + svg::kPlotW, axis.max_bytes),
                pic.title, pic.subtitle);
  out += held_ticks(axis, bottom, unit);
  for (std::size_t i = 0; i < pic.bars.size(); ++i) {
    out += held_bar(pic.bars[i], svg::kTop + kSlot * static_cast<double>(i), axis);
  }
  return out + usable_line(pic, axis, bottom) + held_legend(pic) + "</svg>\n";
}

std::string engine_title(ServeEngine e) {
  switch (e) {
    case ServeEngine::vllm:
      return "vLLM";
    case ServeEngine::llama_cpp:
      return "llama.cpp";
    case ServeEngine::sglang:
      return "SGLang";
    case ServeEngine::hf:
      return "transformers";
  }
  return "";
}

// The line a bar must stay left of: the engine's budget (a fraction of the total), or the device.
std::string usable_words(ServeEngine e, std::uint64_t usable, std::uint64_t total, Unit unit) {
  if (e == ServeEngine::vllm || e == ServeEngine::sglang) {
    return fmt::format("budget {} ({} x {})", format_bytes(usable, unit),
                       e == ServeEngine::vllm ? "gpu_memory_utilization" : "mem_fraction_static",
                       format_bytes(total, unit));
  }
  return fmt::format("the device, {}", format_bytes(usable, unit));
}

}  // namespace

std::string render_serve_fit_svg(const ServeFit& f, Unit unit) {
  HeldPicture pic;
  const std::string_view flag = serve_fit_flag(f.engine, f.target);
  pic.title = fmt::format("{} on {}, {}: the largest {} that fits", f.model, engine_title(f.engine),
                          f.gpu, flag);
  pic.subtitle = fmt::format(
      "each weight format and KV-cache type at its largest {}, {} {}; bytes per device, {} "
      "device{}",
      flag, serve_held_flag(f.engine, f.target), format_count(f.held_fixed), f.devices,
      f.devices == 1 ? "" : "s");
  pic.usable = f.usable_memory;
  pic.usable_label = usable_words(f.engine, f.usable_memory, f.total_memory, unit);
  for (const ServeFitRow& r : f.rows) {
    HeldBar b;
    const std::string value =
        r.best           ? fmt::format("{} {}{}", flag, format_count(*r.best),
                             *r.best >= f.limit ? " (the search's bound)" : "")
        : r.held.empty() ? std::string("none fits (1 refused: the table's note says why)")
                         : std::string("none fits (1 drawn)");
    b.label = fmt::format("{}, KV cache {}: {}", r.weights, r.kv_cache, value);
    b.best = r.best ? std::to_string(*r.best) : "";
    b.fits = r.best.has_value();
    b.parts = r.held;
    pic.bars.push_back(std::move(b));
  }
  return held_svg(pic, unit);
}

std::string render_serve_svg(const ServeEstimate& e, const ServeHeldBars& bars,
                             const std::string& gpu, std::uint64_t total, Unit unit) {
  HeldPicture pic;
  pic.title = fmt::format("{} on {}, {}: memory per device", e.model, engine_title(e.engine), gpu);
  pic.subtitle = fmt::format("context {}; bytes per device, {} device{}", format_count(e.context),
                             e.devices, e.devices == 1 ? "" : "s");
  pic.usable = e.budget_bytes.value_or(total);
  pic.usable_label = usable_words(e.engine, pic.usable, total, unit);
  for (const auto& [name, parts] : bars) pic.bars.push_back({name, "", e.fits, parts});
  return held_svg(pic, unit);
}

}  // namespace memest
