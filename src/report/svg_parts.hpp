#pragma once
// Private to the SVG pictures (--plot): the page, its fonts, the bytes axis, the levels and the
// legend that every picture draws alike (src/report/report_svg.cpp for training,
// src/serve/serve_svg.cpp for serving). Geometry and formatting only.

#include <memest/units.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

namespace memest::svg {

inline constexpr double kWidth = 960, kHeight = 520;
inline constexpr double kLeft = 80, kRight = 270, kTop = 64, kBottom = 90;  // the plot's margins
inline constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
// A text box's height with a margin: a 12 px font's box is about 1.2 em (ascent and descent).
inline constexpr double kTextBox = 16;

/// A colour as "#rrggbb" from 0xRRGGBB (src/step/memory_kinds.cpp's).
std::string colour(std::uint32_t rgb);

/// Text with XML's special characters escaped.
std::string esc(std::string_view text);

/// An axis of bytes from 0 to a round number of the report's unit: `max_bytes` at its end,
/// `step` bytes between ticks.
struct Axis {
  double max_bytes = 1;
  double step = 1;
  /// The vertical position of `bytes` on a y axis over the plot area.
  [[nodiscard]] double y(std::uint64_t bytes) const;
  /// The horizontal position of `bytes` on an x axis over the plot area.
  [[nodiscard]] double x(std::uint64_t bytes) const;
};

/// The axis to at least `top` bytes, ticks at 1, 2, 2.5 or 5 times a power of ten of `unit`.
Axis axis_for(std::uint64_t top, Unit unit);

/// The tick positions, by repeated addition as they were first drawn (a product i x step can
/// round to another last digit): each tick's bytes, 0 to the axis' end.
template <typename F>
void for_each_tick(const Axis& axis, F f) {
  double b = 0;
  while (b <= axis.max_bytes * (1 + 1e-9)) {
    const auto bytes = static_cast<std::uint64_t>(std::llround(b));
    b += axis.step;
    f(bytes);
  }
}

/// The page `height` px tall with `data` (attributes) on its root, its white ground, the title
/// and the subtitle.
std::string page(double height, std::string_view data, std::string_view title,
                 std::string_view subtitle);

/// A legend row at the right of the plot: a swatch and its words, row 0 at the top.
std::string legend_row(std::size_t row, std::string_view color, std::string_view label);

}  // namespace memest::svg
