#pragma once
// Private to src/serve: the serve estimate as a table for a person and as JSON for a program
// (the keys of docs/serving.md); they format, they compute nothing.

#include <memest/serve.hpp>
#include <memest/serve_fit.hpp>
#include <memest/units.hpp>

#include <string>

namespace memest {

/// The terminal table: one row per part of a device's memory, with its basis.
std::string render_serve_table(const ServeEstimate& e, const std::string& gpu, Unit unit);

/// The JSON object: per-device bytes under weights, kv_cache, activations, non_torch,
/// cuda_graphs (null where not modelled) and max_concurrency; last `inputs`, the serve run
/// config that gives it again (serve_config_of's JSON text).
std::string render_serve_json(const ServeEstimate& e, const std::string& inputs);

/// `--fit`'s table: what was searched and held, then one row per weight format and KV-cache
/// type with the largest value, the weights and KV cache at it, its headroom and what the next
/// value lacks.
std::string render_serve_fit_table(const ServeFit& fit, Unit unit);

/// `--fit`'s JSON: the same rows under stable keys (bytes per device, null where absent).
std::string render_serve_fit_json(const ServeFit& fit);

}  // namespace memest
