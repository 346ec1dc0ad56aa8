#pragma once

#include <memest/estimate.hpp>
#include <memest/units.hpp>

#include <string>

namespace memest {

/// How a report is printed.
struct ReportOptions {
  Unit unit = Unit::GB;  ///< unit of the human table; JSON always carries exact bytes
};

/// Version of the JSON layout; bumped when a key changes meaning or disappears.
inline constexpr int kJsonSchemaVersion = 1;

/// The library's version, e.g. "0.1.0".
std::string_view version();

/// A human table: one row per category with dtype, bytes per element, size and basis, then the
/// total and the assumptions. Ends with a newline.
std::string render_table(const RunSpec& run, const Estimate& est, const ReportOptions& options);

/// JSON with stable snake_case keys, integer byte counts, the inputs echoed back and
/// `schema_version`. Categories not estimated have `"bytes": null`. Ends with a newline.
std::string render_json(const RunSpec& run, const Estimate& est, const ReportOptions& options);

}  // namespace memest
