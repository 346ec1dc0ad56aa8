#include "serve/serve_render.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace memest {
namespace {

std::string engine_name(ServeEngine e) { return e == ServeEngine::vllm ? "vllm" : "llama.cpp"; }

std::string row(std::string_view name, const std::string& size, const std::string& basis) {
  return fmt::format("{:<20} {:>14}  {}\n", name, size, basis);
}

std::string optional_bytes(const std::optional<std::uint64_t>& b, Unit unit) {
  return b ? format_bytes(*b, unit) : "not modelled";
}

std::string kv_rows(const ServeEstimate& e, Unit unit) {
  std::string s = row("KV cache", format_bytes(e.kv_bytes, unit), e.kv_basis);
  s += row("KV per token", format_bytes(e.kv_bytes_per_token, Unit::KiB),
           "every layer, this device");
  std::string tokens = format_count(e.kv_tokens);
  if (e.kv_blocks) tokens += fmt::format(" tokens in {} blocks", format_count(*e.kv_blocks));
  s += row("KV tokens", "", tokens);
  if (e.max_concurrency) {
    s += row("max concurrency", fmt::format("{:.2f}x", *e.max_concurrency),
             fmt::format("requests of {} tokens at once", format_count(e.context)));
  }
  return s;
}

}  // namespace

std::string render_serve_table(const ServeEstimate& e, const std::string& gpu, Unit unit) {
  std::string s = fmt::format("model      {} ({}, {} device{}; figures per device)\n", e.model,
                              engine_name(e.engine), e.devices, e.devices == 1 ? "" : "s");
  if (e.budget_bytes) {
    s += fmt::format("budget     {} of {} (gpu_memory_utilization x total)\n",
                     format_bytes(*e.budget_bytes, unit), gpu);
  }
  s += fmt::format("\n{:<20} {:>14}  {}\n", "part", "size", "basis");
  if (e.weights_bytes) s += row("weights", format_bytes(*e.weights_bytes, unit), e.weights_basis);
  if (e.activation_peak_bytes) {
    s += row("activation peak", format_bytes(*e.activation_peak_bytes, unit), e.activation_basis);
  }
  if (e.compute_buffer_bytes) {
    s += row("compute buffer", format_bytes(*e.compute_buffer_bytes, unit), e.compute_basis);
  }
  if (e.non_torch_bytes) {
    s += row("non-torch", format_bytes(*e.non_torch_bytes, unit), e.non_torch_basis);
  }
  s += kv_rows(e, unit);
  if (e.engine == ServeEngine::vllm) {
    s += row(
        "CUDA graphs", optional_bytes(e.cuda_graphs_bytes, unit),
        e.cuda_graphs_bytes ? "--enforce-eager" : "taken after the KV cache; not in the budget");
  }
  for (const std::string& n : e.notes) s += fmt::format("note: {}\n", n);
  if (!e.fits) {
    s += fmt::format(
        "does not start: one request of {} tokens needs more KV cache than the {} left; the "
        "longest max_model_len that fits is {}\n",
        format_count(e.context), format_bytes(e.kv_bytes, unit),
        format_count(e.largest_context.value_or(0)));
  }
  return s;
}

std::string render_serve_json(const ServeEstimate& e) {
  using nlohmann::ordered_json;
  const auto opt = [](const auto& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  ordered_json j;
  j["engine"] = engine_name(e.engine);
  j["model"] = e.model;
  j["devices"] = e.devices;
  j["context"] = e.context;
  j["weights"] = {{"bytes", opt(e.weights_bytes)}};
  j["kv_cache"] = {{"bytes_per_token", e.kv_bytes_per_token},
                   {"bytes", e.kv_bytes},
                   {"tokens", e.kv_tokens},
                   {"blocks", opt(e.kv_blocks)}};
  j["activations"] = {{"peak_bytes", opt(e.activation_peak_bytes)}};
  j["compute_buffer"] = {{"bytes", opt(e.compute_buffer_bytes)}};
  j["non_torch"] = {{"bytes", opt(e.non_torch_bytes)}};
  j["cuda_graphs"] = {{"bytes", opt(e.cuda_graphs_bytes)}};
  j["max_concurrency"] = opt(e.max_concurrency);
  j["fits"] = e.fits;
  j["largest_max_model_len"] = opt(e.largest_context);
  j["notes"] = e.notes;
  return j.dump(2) + "\n";
}

}  // namespace memest
