#pragma once
// `memest serve --fit` (docs/serving.md): the largest context or concurrency an engine's launch
// can be given on a device, searched over the serve estimate itself, one row per weight format
// and KV-cache type so that the choices can be compared side by side.

#include <memest/serve.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memest {

/// What `--fit` maximises: the context (vLLM --max-model-len, SGLang --context-length, llama.cpp
/// --ctx-size) or the requests served at once (vLLM --max-num-seqs, SGLang
/// --max-running-requests, llama.cpp --parallel).
enum class ServeFitTarget { context, concurrency };

/// The serve estimate at one value of the searched flag, and the two sides of the test the value
/// passes when it fits: `need <= available` (bytes on one device).
struct ServeProbe {
  ServeEstimate estimate;
  std::uint64_t need = 0;
  std::uint64_t available = 0;
  [[nodiscard]] bool fits() const { return need <= available; }
};

/// The estimate at a value of the searched flag; throws Error where the engine cannot start at
/// all (no memory left for the KV cache), which the search counts as not fitting.
using ServeProbeFn = std::function<ServeProbe(std::uint64_t)>;

/// A kind of memory a device holds, as the serve pictures (--plot) draw it, bottom to top.
/// kv_cache_free: vLLM's KV cache beyond what --fit's value takes (vLLM allocates the whole
/// budget's KV cache whatever the value).
enum class ServeHeld { weights, activations, compute_buffer, non_torch, kv_cache, kv_cache_free };

struct ServeHeldPart {
  ServeHeld part = ServeHeld::weights;
  std::uint64_t bytes = 0;
};

/// What one device holds per the estimate, the parts it has in ServeHeld's order: the weights,
/// vLLM's profile-run peak and non-torch memory or llama.cpp's compute buffer, the KV cache
/// (under hf, the forward's peak and the cache at that moment: they sum to the peak).
std::vector<ServeHeldPart> serve_held(const ServeEstimate& e);

/// The same at a probe of --fit, its KV cache split into what the value takes (vLLM: the
/// probe's need; llama.cpp: all of it, allocated for the value) and the rest.
std::vector<ServeHeldPart> serve_held(const ServeProbe& p);

/// llama.cpp's devices (--device ...), each with what it holds (no compute buffer without layers).
std::vector<std::pair<std::string, std::vector<ServeHeldPart>>> serve_held_devices(
    const ServeEstimate& e);

/// One launch compared: its weight format and KV-cache type, the flags that make it, and the
/// largest value of the searched flag that fits (absent when not even 1 does).
struct ServeFitRow {
  std::string weights;             ///< "bf16", "fp8", "Q4_K_M", a GGUF file's name
  std::string kv_cache;            ///< "auto", "fp8", "f16", "q8_0" (K and V alike), ...
  std::vector<std::string> flags;  ///< the engine flags of this row, as a launch line has them
  std::optional<std::uint64_t> best;
  std::optional<ServeProbe> at_best;    ///< the estimate at `best`
  std::optional<ServeProbe> past_best;  ///< at best + 1 (or at 1 when nothing fits)
  std::string why_not;                  ///< when the estimate refused a value outright: its message
  /// What a device holds at `best` (at 1, past_best, when nothing fits): --plot's bar.
  std::vector<ServeHeldPart> held;
};

/// The largest value in [1, limit] whose probe fits. The estimate grows with the value (more
/// context or requests need more KV cache; vLLM's profile run grows with max_num_seqs), so the
/// search doubles from 1 and bisects the boundary; the boundary is then checked exactly: the
/// probe at `best` fits and the one at best + 1 does not, and the search walks down from a
/// boundary that fails the check. A probe that throws Error counts as not fitting (its message
/// is kept in why_not).
ServeFitRow fit_serve_row(const ServeProbeFn& probe, std::uint64_t limit);

/// vLLM's probe of `target`: the context fits when one request of max_model_len fits the KV
/// memory (vLLM starts: check_enough_kv_cache_memory); max_num_seqs requests fit when that many
/// requests of max_model_len fit the KV blocks at once (blocks >= n x the blocks one request
/// takes), the profile run sized for max_num_seqs.
ServeProbeFn vllm_probe(const ServeModel& model, VllmSettings settings, ServeFitTarget target);

/// SGLang's probe of `target`: --context-length fits when one request of it fits the KV pool
/// (max_total_num_tokens tokens; the full layers' pool of a hybrid SWA model);
/// --max-running-requests n fits when n requests of context_length tokens fit it at once.
ServeProbeFn sglang_probe(const ServeModel& model, SglangSettings settings, ServeFitTarget target);

/// llama.cpp's probe: the weights (the caller's `estimate`, which sizes them), the KV cache and
/// the compute buffer within `total` bytes. The context is --ctx-size; concurrency is --parallel
/// n slots of `per_request` cells each, as llama-server splits --ctx-size n x per_request.
using LlamaCppEstimateFn = std::function<ServeEstimate(const LlamaCppSettings&)>;
ServeProbeFn llama_cpp_probe(const LlamaCppEstimateFn& estimate, LlamaCppSettings settings,
                             ServeFitTarget target, std::uint64_t per_request, std::uint64_t total);

/// The flag `--fit` searches (--max-model-len, --max-num-seqs, --ctx-size, --parallel) and the
/// one it keeps as given.
std::string_view serve_fit_flag(ServeEngine engine, ServeFitTarget target);
std::string_view serve_held_flag(ServeEngine engine, ServeFitTarget target);

/// transformers' probe: the peak (weights, cache and the forward's tensors) within the device.
/// The context is --prompt-len, concurrency --batch-size.
ServeProbeFn hf_probe(const ServeModel& model, HfSettings settings, ServeFitTarget target);

/// What `memest serve --fit` prints: the rows and what they share.
struct ServeFit {
  ServeEngine engine = ServeEngine::vllm;
  ServeFitTarget target = ServeFitTarget::context;
  std::string model;
  std::string gpu;  ///< the device's name (or "N GiB total")
  std::uint64_t total_memory = 0;
  /// What a device's parts must fit: vLLM's budget (gpu_memory_utilization x total),
  /// llama.cpp's whole device.
  std::uint64_t usable_memory = 0;
  std::uint64_t devices = 1;
  std::uint64_t limit = 0;
  bool limit_is_model = false;   ///< the limit is the model's max_position_embeddings
  std::uint64_t held_fixed = 0;  ///< concurrency: tokens per request; context: max_num_seqs
  /// hf: the other value kept, --batch-size for a context, --max-new-tokens for concurrency
  std::uint64_t held_extra = 0;
  std::vector<ServeFitRow> rows;
};

}  // namespace memest
