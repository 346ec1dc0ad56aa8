// What every SVG picture draws alike: the page, the bytes axis, the legend (svg_parts.hpp).
#include "report/svg_parts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace memest::svg {

std::string colour(std::uint32_t rgb) { return fmt::format("#{:06x}", rgb); }

std::string esc(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double Axis::y(std::uint64_t bytes) const {
  return kTop + kPlotH - static_cast<double>(bytes) / max_bytes * kPlotH;
}

double Axis::x(std::uint64_t bytes) const {
  return kLeft + static_cast<double>(bytes) / max_bytes * kPlotW;
}

Axis axis_for(std::uint64_t top, Unit unit) {
  const double per = static_cast<double>(unit_bytes(unit));
  const double span = std::max(static_cast<double>(top) / per, 1e-9) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(span)));
  double step = 10 * mag;
  for (const double f : {1.0, 2.0, 2.5, 5.0}) {
    if (f * mag >= span) {
      step = f * mag;
      break;
    }
  }
  const double ticks = std::max(1.0, std::ceil(static_cast<double>(top) / per / step));
  return {ticks * step * per, step * per};
}

std::string page(double height, std::string_view data, std::string_view title,
                 std::string_view subtitle) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\" {2}>\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{3}\" y=\"24\" font-size=\"16\" font-weight=\"bold\">{4}</text>\n"
      "<text x=\"{3}\" y=\"44\" fill=\"#555\">{5}</text>\n",
      kWidth, height, data, kLeft, esc(title), esc(subtitle));
}

std::string legend_row(std::size_t row, std::string_view color, std::string_view label) {
  const double y = kTop + 10 + 20 * static_cast<double>(row);
  const double x = kLeft + kPlotW + 16;
  return fmt::format(
      "<rect x=\"{0}\" y=\"{1:.2f}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
      "<text x=\"{3}\" y=\"{4:.2f}\">{5}</text>\n",
      x, y - 10, color, x + 18, y, esc(label));
}

}  // namespace memest::svg
