#pragma once
// Private to src/serve: the serve estimate as a table for a person and as JSON for a program
// (the keys of docs/serving.md); they format, they compute nothing.

#include <memest/serve.hpp>
#include <memest/serve_fit.hpp>
#include <memest/units.hpp>

#include <string>
#include <utility>
#include <vector>

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

/// What each bar of a serve picture holds: its name and parts (a plain run's devices).
using ServeHeldBars = std::vector<std::pair<std::string, std::vector<ServeHeldPart>>>;

/// `--fit --plot`'s SVG picture (src/serve/serve_svg.cpp): one horizontal stacked bar per row,
/// what a device holds at its largest value (ServeFitRow::held), against the usable memory.
std::string render_serve_fit_svg(const ServeFit& fit, Unit unit);

/// A plain run's picture: one bar per device in `bars` (serve_held), against vLLM's budget or
/// llama.cpp's whole device of `total` bytes (`gpu` names it).
std::string render_serve_svg(const ServeEstimate& e, const ServeHeldBars& bars,
                             const std::string& gpu, std::uint64_t total, Unit unit);

}  // namespace memest
