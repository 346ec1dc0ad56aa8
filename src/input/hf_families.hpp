// The config.json reader of each supported model_type (hf_families.cpp; the list is
// supported_model_types() of hf_config.hpp), private to the library.
#pragma once

#include "input/json_access.hpp"

#include <memest/model.hpp>

#include <string>
#include <string_view>

namespace memest::detail {

/// The older model_type spellings read as "falcon": the RefinedWeb remote-code configs.
std::span<const std::string_view> falcon_legacy_types();

/// Fills `a` from the config of `a.model_type` (already mapped: "falcon" for the RefinedWeb
/// spellings, whose original is `raw_type`); false when the type has no reader.
bool read_family(const JsonObject& r, Architecture& a, const std::string& raw_type);

}  // namespace memest::detail
