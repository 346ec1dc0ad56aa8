// `memest serve --fit`: the largest value of one launch flag that fits, searched over the serve
// estimate. Which test a value must pass is each engine's own: vLLM starts when one request of
// max_model_len fits the KV memory (check_enough_kv_cache_memory, v1/core/kv_cache_utils.py) and
// serves max_num_seqs requests of it at once when that many fit the blocks; llama.cpp allocates
// the weights, the KV cache and the compute buffer up front and fits when they do.
#include <memest/error.hpp>
#include <memest/serve_fit.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <utility>

namespace memest {
namespace {

// The probe at `value`, or none where the estimate refuses it outright (kept in `why`).
std::optional<ServeProbe> probe_at(const ServeProbeFn& probe, u64 value, std::string& why) {
  try {
    return probe(value);
  } catch (const SizeOverflow&) {
    return std::nullopt;
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
}

bool probe_fits(const std::optional<ServeProbe>& p) { return p && p->fits(); }

// Doubling from 1 then bisection: the largest value in [1, limit] that fits, given that 1 does.
u64 bisect_largest(const ServeProbeFn& probe, u64 limit, std::string& why) {
  u64 lo = 1;
  u64 hi = 0;  // 0: no value known not to fit
  while (hi == 0 && lo < limit) {
    const u64 next = lo > limit / 2 ? limit : lo * 2;
    if (probe_fits(probe_at(probe, next, why))) {
      lo = next;
    } else {
      hi = next;
    }
  }
  while (hi != 0 && hi - lo > 1) {
    const u64 mid = lo + (hi - lo) / 2;
    if (probe_fits(probe_at(probe, mid, why))) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

ServeFitRow fit_serve_row(const ServeProbeFn& probe, u64 limit) {
  ServeFitRow row;
  std::string why;
  auto at = probe_at(probe, 1, why);
  if (!probe_fits(at) || limit == 0) {
    row.past_best = at;
    row.why_not = why;
    if (at) row.held = serve_held(*at);
    return row;
  }
  u64 best = bisect_largest(probe, limit, why);
  // The exact check at the boundary: `best` fits and best + 1 does not. The estimate is
  // monotone in both flags, so the walk down never runs; it guards the answer if one is not.
  at = probe_at(probe, best, why);
  while (best > 1 && !probe_fits(at)) at = probe_at(probe, --best, why);
  row.best = best;
  row.at_best = at;
  row.held = serve_held(*at);
  if (best < limit) {
    row.past_best = probe_at(probe, best + 1, why);
    if (!row.past_best) row.why_not = why;
  }
  return row;
}

std::string_view serve_fit_flag(ServeEngine e, ServeFitTarget t) {
  if (e == ServeEngine::vllm)
    return t == ServeFitTarget::context ? "--max-model-len" : "--max-num-seqs";
  if (e == ServeEngine::sglang)
    return t == ServeFitTarget::context ? "--context-length" : "--max-running-requests";
  if (e == ServeEngine::hf) return t == ServeFitTarget::context ? "--prompt-len" : "--batch-size";
  return t == ServeFitTarget::context ? "--ctx-size" : "--parallel";
}

std::string_view serve_held_flag(ServeEngine e, ServeFitTarget t) {
  if (e == ServeEngine::vllm)
    return t == ServeFitTarget::context ? "--max-num-seqs" : "--max-model-len";
  if (e == ServeEngine::sglang)
    return t == ServeFitTarget::context ? "--max-running-requests" : "--context-length";
  if (e == ServeEngine::hf)
    return t == ServeFitTarget::context ? "--max-new-tokens" : "--prompt-len";
  return t == ServeFitTarget::context ? "--parallel" : "--ctx-size";
}

std::vector<ServeHeldPart> serve_held(const ServeEstimate& e) {
  std::vector<ServeHeldPart> out;
  const auto add = [&](ServeHeld part, const std::optional<u64>& bytes) {
    if (bytes) out.push_back({part, *bytes});
  };
  add(ServeHeld::weights, e.weights_bytes);
  add(ServeHeld::activations, e.activation_peak_bytes);
  add(ServeHeld::compute_buffer, e.compute_buffer_bytes);
  add(ServeHeld::non_torch, e.non_torch_bytes);
  // hf: the cache at the peak's moment, so that the parts sum to the peak.
  add(ServeHeld::kv_cache, e.peak_cache_bytes ? *e.peak_cache_bytes : e.kv_bytes);
  return out;
}

std::vector<ServeHeldPart> serve_held(const ServeProbe& p) {
  std::vector<ServeHeldPart> out = serve_held(p.estimate);
  const ServeEngine engine = p.estimate.engine;
  if (engine != ServeEngine::vllm && engine != ServeEngine::sglang) return out;
  // vLLM and SGLang allocate the whole KV cache at start: the part the value takes is the
  // probe's need (one request of the context, or that many requests of it); the rest is free.
  const u64 kv = p.estimate.kv_bytes;
  out.back().bytes = p.need;
  if (kv > p.need) out.push_back({ServeHeld::kv_cache_free, kv - p.need});
  return out;
}

std::vector<std::pair<std::string, std::vector<ServeHeldPart>>> serve_held_devices(
    const ServeEstimate& e) {
  std::vector<std::pair<std::string, std::vector<ServeHeldPart>>> out;
  for (const ServeDevice& d : e.per_device) {
    std::vector<ServeHeldPart> parts;
    if (e.weights_bytes) parts.push_back({ServeHeld::weights, d.weights_bytes});
    parts.push_back({ServeHeld::compute_buffer, d.compute_buffer_bytes});
    parts.push_back({ServeHeld::kv_cache, d.kv_bytes});
    out.emplace_back(d.name, std::move(parts));
  }
  return out;
}

ServeProbeFn vllm_probe(const ServeModel& model, VllmSettings s, ServeFitTarget target) {
  return [model, s, target](u64 value) mutable {
    ServeProbe p;
    if (target == ServeFitTarget::context) {
      s.max_model_len = value;
      p.estimate = estimate_vllm(model, s);
      p.need = p.estimate.request_kv_bytes.value_or(0);
      p.available = p.estimate.kv_memory_bytes.value_or(0);
      return p;
    }
    s.max_num_seqs = value;
    p.estimate = estimate_vllm(model, s);
    const ServeEstimate& e = p.estimate;
    const u64 blocks = e.kv_blocks.value_or(0);
    const u64 block_bytes = blocks == 0 ? 0 : e.kv_bytes / blocks;
    p.need = checked_mul(checked_mul(value, e.request_blocks.value_or(0)), block_bytes);
    p.available = e.kv_bytes;
    return p;
  };
}

ServeProbeFn sglang_probe(const ServeModel& model, SglangSettings s, ServeFitTarget target) {
  return [model, s, target](u64 value) mutable {
    u64 requests = 1;
    if (target == ServeFitTarget::context) {
      s.context_length = value;
    } else {
      s.max_running_requests = value;
      requests = value;
    }
    ServeProbe p;
    p.estimate = estimate_sglang(model, s);
    const ServeEstimate& e = p.estimate;
    p.need = checked_mul(checked_mul(requests, e.context), e.kv_bytes_per_token);
    p.available = checked_mul(e.kv_tokens, e.kv_bytes_per_token);
    return p;
  };
}

ServeProbeFn hf_probe(const ServeModel& model, HfSettings s, ServeFitTarget target) {
  return [model, s, target](u64 value) mutable {
    (target == ServeFitTarget::context ? s.prompt_len : s.batch_size) = value;
    ServeProbe p;
    p.estimate = estimate_hf(model, s);
    p.need = p.estimate.peak_bytes.value_or(0);
    p.available = p.estimate.budget_bytes.value_or(0);
    return p;
  };
}

ServeProbeFn llama_cpp_probe(const LlamaCppEstimateFn& estimate, LlamaCppSettings s,
                             ServeFitTarget target, u64 per_request, u64 total) {
  return [estimate, s, target, per_request, total](u64 value) mutable {
    if (target == ServeFitTarget::context) {
      s.ctx_size = value;
    } else {
      s.parallel = value;
      s.ctx_size = checked_mul(value, per_request);
    }
    ServeProbe p;
    p.estimate = estimate(s);
    const ServeEstimate& e = p.estimate;
    p.need = checked_add(checked_add(e.weights_bytes.value_or(0), e.kv_bytes),
                         e.compute_buffer_bytes.value_or(0));
    p.available = total;
    return p;
  };
}

}  // namespace memest
