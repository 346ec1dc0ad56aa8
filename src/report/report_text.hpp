#pragma once
// The parts of the table that other formats repeat word for word (Markdown): one label and one
// note text for every figure, whichever format shows it (issue 23).

#include <memest/estimate.hpp>
#include <memest/units.hpp>

#include <string>
#include <string_view>

namespace memest {

/// The table's label of the device total: "device total (sum of the device rows)", or "(sum,
/// without activations)" when they are not estimated.
std::string_view total_label(const Estimate& e);

/// The table's lines after the device total: the peak over a step and what is live at it, the
/// pipeline stages, and every assumed:, note: and warning: line.
std::string render_peak_and_notes(const RunSpec& run, const Estimate& e, Unit unit);

}  // namespace memest
