#include "serve/serve_render.hpp"

#include <memest/serve_options.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace memest {
namespace {

std::string engine_name(ServeEngine e) { return std::string(serve_engine_name(e)); }

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
  if (e.swa_tokens) {
    s += row("KV tokens (SWA)", "", format_count(*e.swa_tokens) + " tokens in the sliding layers");
  }
  if (e.request_pool_bytes) {
    s += row("request pool", format_bytes(*e.request_pool_bytes, unit),
             fmt::format("req_to_token: {} requests x ({} + 4) int32",
                         format_count(*e.request_pool_size), format_count(e.context)));
  }
  if (e.max_running_requests) {
    s += row("max running reqs", format_count(*e.max_running_requests),
             "min(--max-running-requests or KV tokens / 2, the request pool)");
  } else if (e.max_concurrency) {
    s += row("max concurrency", fmt::format("{:.2f}x", *e.max_concurrency),
             fmt::format("requests of {} tokens at once", format_count(e.context)));
  }
  return s;
}

// llama.cpp's devices, one row each, and the host's share (--device, --split-mode, ...).
std::string device_rows(const ServeEstimate& e, Unit unit) {
  if (!e.devices_shown) return "";
  std::string s = fmt::format("\n{:<10} {:>6} {:>6} {:>14} {:>14} {:>14}\n", "device", "layers",
                              "output", "weights", "KV cache", "compute buffer");
  for (const ServeDevice& d : e.per_device) {
    s += fmt::format("{:<10} {:>6} {:>6} {:>14} {:>14} {:>14}\n", d.name, d.layers,
                     d.output ? "yes" : "",
                     e.weights_bytes ? format_bytes(d.weights_bytes, unit) : "-",
                     format_bytes(d.kv_bytes, unit), format_bytes(d.compute_buffer_bytes, unit));
  }
  s += fmt::format(
      "{:<10} {:>6} {:>6} {:>14} {:>14} {:>14}\n", "host", "", "",
      e.host_weights_bytes ? format_bytes(*e.host_weights_bytes, unit) : "-",
      format_bytes(e.host_kv_bytes.value_or(0), unit),
      e.host_compute_buffer_bytes ? format_bytes(*e.host_compute_buffer_bytes, unit) : "-");
  return s;
}

// transformers' generate(): the parts, the peak they make and whether it fits the device.
std::string hf_table(const ServeEstimate& e, const std::string& gpu, Unit unit) {
  std::string s = fmt::format("model      {} (hf, 1 device)\n", e.model);
  s += fmt::format("device     {} ({})\n", gpu, format_bytes(e.budget_bytes.value_or(0), unit));
  s += fmt::format("\n{:<20} {:>14}  {}\n", "part", "size", "basis");
  if (e.weights_bytes) s += row("weights", format_bytes(*e.weights_bytes, unit), e.weights_basis);
  s += row("forward peak", optional_bytes(e.activation_peak_bytes, unit), e.activation_basis);
  s += row("KV cache", format_bytes(e.kv_bytes, unit), e.kv_basis);
  s += row("KV per token", format_bytes(e.kv_bytes_per_token, Unit::KiB),
           "every layer, one sequence");
  s += row("KV tokens", "", format_count(e.kv_tokens) + " (batch x tokens cached)");
  s += row("peak", optional_bytes(e.peak_bytes, unit), e.peak_basis);
  for (const std::string& n : e.notes) s += fmt::format("note: {}\n", n);
  if (!e.fits) {
    s += fmt::format("does not fit: the peak passes the device's {}\n",
                     format_bytes(e.budget_bytes.value_or(0), unit));
  }
  return s;
}

}  // namespace

std::string render_serve_table(const ServeEstimate& e, const std::string& gpu, Unit unit) {
  if (e.engine == ServeEngine::hf) return hf_table(e, gpu, unit);
  std::string s = fmt::format("model      {} ({}, {} device{}; figures per device)\n", e.model,
                              engine_name(e.engine), e.devices, e.devices == 1 ? "" : "s");
  if (e.budget_bytes) {
    s += fmt::format("budget     {} of {} ({})\n", format_bytes(*e.budget_bytes, unit), gpu,
                     e.budget_basis);
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
    s += row("CUDA graphs", optional_bytes(e.cuda_graphs_bytes, unit), e.cuda_graphs_basis);
  } else if (e.engine == ServeEngine::sglang) {
    s += row("CUDA graphs", optional_bytes(e.cuda_graphs_bytes, unit),
             e.cuda_graphs_bytes ? "--disable-cuda-graph" : "in the reserve; not modelled");
  }
  s += device_rows(e, unit);
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

std::string render_serve_json(const ServeEstimate& e, const std::string& inputs) {
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
  if (e.swa_tokens) j["kv_cache"]["swa_tokens"] = *e.swa_tokens;
  j["activations"] = {{"peak_bytes", opt(e.activation_peak_bytes)}};
  j["compute_buffer"] = {{"bytes", opt(e.compute_buffer_bytes)}};
  j["non_torch"] = {{"bytes", opt(e.non_torch_bytes)}};
  j["cuda_graphs"] = {{"bytes", opt(e.cuda_graphs_bytes)}};
  j["max_concurrency"] = opt(e.max_concurrency);
  if (e.request_pool_bytes) {
    j["request_pool"] = {{"requests", opt(e.request_pool_size)},
                         {"bytes", opt(e.request_pool_bytes)},
                         {"max_running_requests", opt(e.max_running_requests)}};
  }
  j["fits"] = e.fits;
  j["largest_max_model_len"] = opt(e.largest_context);
  j["notes"] = e.notes;
  if (e.devices_shown) {
    ordered_json devices = ordered_json::array();
    for (const ServeDevice& d : e.per_device) {
      devices.push_back(
          {{"device", d.name},
           {"layers", d.layers},
           {"output", d.output},
           {"weights",
            {{"bytes", e.weights_bytes ? ordered_json(d.weights_bytes) : ordered_json(nullptr)}}},
           {"kv_cache", {{"bytes", d.kv_bytes}}},
           {"compute_buffer", {{"bytes", d.compute_buffer_bytes}}}});
    }
    j["per_device"] = devices;
    j["host"] = {{"weights", {{"bytes", opt(e.host_weights_bytes)}}},
                 {"kv_cache", {{"bytes", opt(e.host_kv_bytes)}}},
                 {"compute_buffer", {{"bytes", opt(e.host_compute_buffer_bytes)}}}};
  }
  if (e.peak_bytes) j["peak"] = {{"bytes", *e.peak_bytes}};
  j["inputs"] = ordered_json::parse(inputs);
  return j.dump(2) + "\n";
}

}  // namespace memest

namespace memest {
namespace {

std::string_view fit_flag(const ServeFit& f) { return serve_fit_flag(f.engine, f.target); }

// What the search keeps and how each engine decides that a value fits.
std::string fit_header(const ServeFit& f, Unit unit) {
  std::string s = fmt::format("model      {} ({}, {} device{}; figures per device)\n", f.model,
                              engine_name(f.engine), f.devices, f.devices == 1 ? "" : "s");
  s += f.gpu.ends_with(" total")
           ? fmt::format("device     {}\n", f.gpu)
           : fmt::format("device     {} ({})\n", f.gpu, format_bytes(f.total_memory, unit));
  const bool vllm = f.engine == ServeEngine::vllm;
  const bool context = f.target == ServeFitTarget::context;
  std::string rule;
  if (f.engine == ServeEngine::sglang) {
    rule = context ? "the longest --context-length one request of which fits the KV pool"
                   : fmt::format("the most requests of {} tokens the KV pool holds at once",
                                 format_count(f.held_fixed));
  } else if (f.engine == ServeEngine::hf) {
    rule = context ? fmt::format(
                         "the longest --prompt-len whose generate() peak fits the device, at "
                         "--max-new-tokens {} and --batch-size {}",
                         format_count(f.held_fixed), format_count(f.held_extra))
                   : fmt::format(
                         "the largest --batch-size whose generate() peak fits the device, at "
                         "--prompt-len {} and --max-new-tokens {}",
                         format_count(f.held_fixed), format_count(f.held_extra));
  } else if (vllm && context) {
    rule = fmt::format(
        "the longest max_model_len vLLM starts with (one request fits the KV "
        "cache), at max_num_seqs {}",
        format_count(f.held_fixed));
  } else if (vllm) {
    rule = fmt::format(
        "the most requests of {} tokens the KV cache holds at once, the profile "
        "run sized for as many",
        format_count(f.held_fixed));
  } else if (context) {
    rule = fmt::format(
        "the largest --ctx-size whose weights, KV cache and compute buffer fit the "
        "device, at --parallel {}",
        f.held_fixed);
  } else {
    rule = fmt::format(
        "the most --parallel slots of {} cells (--ctx-size n x {}) whose weights, "
        "KV cache and compute buffer fit the device",
        format_count(f.held_fixed), format_count(f.held_fixed));
  }
  s += fmt::format("fit        {}\n", rule);
  const std::string_view bound = f.engine == ServeEngine::hf
                                     ? " (max_position_embeddings - max_new_tokens)"
                                     : " (the model's max_position_embeddings)";
  s += fmt::format("searched   1 to {}{}\n", format_count(f.limit), f.limit_is_model ? bound : "");
  return s;
}

std::string fit_margin(std::uint64_t bytes, Unit unit) {
  return bytes * 100 < unit_bytes(unit) ? format_bytes(bytes, Unit::bytes)
                                        : format_bytes(bytes, unit);
}

// The flag the search keeps as given (or as its default).
std::string_view held_flag(const ServeFit& f) { return serve_held_flag(f.engine, f.target); }

// A flag as a JSON key: "--max-model-len" -> "max_model_len".
std::string flag_key(std::string_view flag) {
  std::string k(flag.substr(2));
  std::replace(k.begin(), k.end(), '-', '_');
  return k;
}

// What the value after the answer (1 when none fits) lacks: its overshoot, the search's bound,
// or the estimate's refusal.
std::string past_cell(const ServeFit& f, const ServeFitRow& r, Unit unit) {
  if (r.best && *r.best >= f.limit) return "the search's bound";
  const std::string next = format_count(r.best ? *r.best + 1 : 1);
  if (r.past_best && !r.past_best->fits()) {
    return next + ": over by " + fit_margin(r.past_best->need - r.past_best->available, unit);
  }
  return next + (r.why_not.empty() ? ": past what memest counts" : ": refused (note)");
}

std::string fit_row(const ServeFit& f, const ServeFitRow& r, Unit unit) {
  const std::string best = r.best ? format_count(*r.best) : "none";
  std::string weights = "-";
  std::string kv = "-";
  std::string headroom = "-";
  if (r.at_best) {
    const ServeEstimate& e = r.at_best->estimate;
    weights = e.weights_bytes ? format_bytes(*e.weights_bytes, unit) : "-";
    kv = format_bytes(e.kv_bytes, unit);
    headroom = fit_margin(r.at_best->available - r.at_best->need, unit);
  }
  return fmt::format("{:<14} {:<9} {:>15} {:>12} {:>12} {:>14}  {:<30} {}\n", r.weights, r.kv_cache,
                     best, weights, kv, headroom, past_cell(f, r, unit), fmt::join(r.flags, " "));
}

}  // namespace

std::string render_serve_fit_table(const ServeFit& f, Unit unit) {
  std::string s = fit_header(f, unit) + "\n";
  s += fmt::format("{:<14} {:<9} {:>15} {:>12} {:>12} {:>14}  {:<30} {}\n", "weights", "KV cache",
                   fit_flag(f), "weights", "KV cache", "headroom", "the next value", "flags");
  for (const ServeFitRow& r : f.rows) s += fit_row(f, r, unit);
  for (const ServeFitRow& r : f.rows) {
    if (!r.why_not.empty()) {
      s += fmt::format("note: {} / {}: {}\n", r.weights, r.kv_cache, r.why_not);
    }
  }
  if (f.engine == ServeEngine::hf) {
    s += "note: the whole device against the torch allocator's peak; the CUDA context, cuBLAS "
         "workspaces and the allocator's rounding are not counted (--gpu-memory states what is "
         "free)\n";
  }
  if (f.engine == ServeEngine::llama_cpp) {
    s += "note: the whole device against llama.cpp's buffers; the CUDA context and driver's share "
         "are not counted (--gpu-memory states what is free)\n";
  }
  return s;
}

namespace {

nlohmann::ordered_json probe_json(const ServeProbe& p) {
  using nlohmann::ordered_json;
  const ServeEstimate& e = p.estimate;
  const auto opt = [](const auto& v) { return v ? ordered_json(*v) : ordered_json(nullptr); };
  return {{"weights", {{"bytes", opt(e.weights_bytes)}}},
          {"kv_cache",
           {{"bytes_per_token", e.kv_bytes_per_token},
            {"bytes", e.kv_bytes},
            {"tokens", e.kv_tokens},
            {"blocks", opt(e.kv_blocks)}}},
          {"activations", {{"peak_bytes", opt(e.activation_peak_bytes)}}},
          {"compute_buffer", {{"bytes", opt(e.compute_buffer_bytes)}}},
          {"max_concurrency", opt(e.max_concurrency)},
          {"need_bytes", p.need},
          {"available_bytes", p.available}};
}

}  // namespace

std::string render_serve_fit_json(const ServeFit& f) {
  using nlohmann::ordered_json;
  ordered_json rows = ordered_json::array();
  for (const ServeFitRow& r : f.rows) {
    rows.push_back(
        {{"weights", r.weights},
         {"kv_cache", r.kv_cache},
         {"flags", r.flags},
         {"best", r.best ? ordered_json(*r.best) : ordered_json(nullptr)},
         {"at_best", r.at_best ? probe_json(*r.at_best) : ordered_json(nullptr)},
         {"past_best", r.past_best ? probe_json(*r.past_best) : ordered_json(nullptr)},
         {"why_not", r.why_not.empty() ? ordered_json(nullptr) : ordered_json(r.why_not)}});
  }
  ordered_json j = {{"engine", engine_name(f.engine)},
                    {"model", f.model},
                    {"devices", f.devices},
                    {"target", f.target == ServeFitTarget::context ? "context" : "concurrency"},
                    {"searched", flag_key(fit_flag(f))},
                    {"held", {{"flag", flag_key(held_flag(f))}, {"value", f.held_fixed}}},
                    {"gpu", f.gpu},
                    {"total_memory_bytes", f.total_memory},
                    {"limit", f.limit},
                    {"limit_is_model_positions", f.limit_is_model},
                    {"rows", rows}};
  if (f.engine == ServeEngine::hf) {
    j["also_held"] = {
        {"flag", f.target == ServeFitTarget::context ? "batch_size" : "max_new_tokens"},
        {"value", f.held_extra}};
  }
  return j.dump(2) + "\n";
}

}  // namespace memest
