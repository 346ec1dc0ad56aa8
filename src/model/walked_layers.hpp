// Private to the core: the bound on walks that take a model's layers one at a time.
#pragma once

#include <cstdint>
#include <string_view>

namespace memest {

/// The most layers walked one at a time: the step laid out in time (--plot), the caching
/// allocator replayed layer by layer (--allocator cuda), vLLM's load replayed parameter by
/// parameter. The estimate itself takes any number of layers in closed form.
inline constexpr std::uint64_t kMaxWalkedLayers = 4096;

/// Throws Error, naming `what` (the flag that asks for the walk), where a model of `layers`
/// layers is past kMaxWalkedLayers (src/model/model.cpp).
void check_walked_layers(std::uint64_t layers, std::string_view what);

}  // namespace memest
