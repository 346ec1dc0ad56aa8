// `memest serve --fit`: the answer fits and one more does not, on random models, devices and
// settings, checked against the plain serve estimate; hand-derived answers; the side-by-side
// rows, the JSON keys and the refusals.
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/hf_config.hpp>
#include <memest/serve.hpp>
#include <memest/serve_fit.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

namespace {

using memest::test::run_cli;
using Json = nlohmann::json;

// The presets the serve estimate reads (every decoder with attention).
const std::vector<memest::ServeModel>& serve_presets() {
  static const std::vector<memest::ServeModel> models = [] {
    std::vector<memest::ServeModel> out;
    for (const auto& p : memest::model_presets()) {
      try {
        memest::ServeModel m = memest::load_serve_model(p.name, "");
        if (m.spec.arch && m.max_positions > 0 && m.spec.arch->num_kv_heads > 0) {
          out.push_back(std::move(m));
        }
      } catch (const memest::Error&) {
      }
    }
    return out;
  }();
  return models;
}

// Whether vLLM's plain estimate at `value` of the searched flag fits, as a user would check it
// by hand: it starts (context), or its max_concurrency reaches max_num_seqs (concurrency).
std::optional<bool> vllm_fits(const memest::ServeModel& m, memest::VllmSettings s,
                              memest::ServeFitTarget t, std::uint64_t value) {
  try {
    if (t == memest::ServeFitTarget::context) {
      s.max_model_len = value;
      return memest::estimate_vllm(m, s).fits;
    }
    s.max_num_seqs = value;
    const memest::ServeEstimate e = memest::estimate_vllm(m, s);
    return *e.kv_blocks >= value * *e.request_blocks;
  } catch (const memest::Error&) {
    return std::nullopt;  // vLLM does not start at all
  }
}

std::optional<bool> llama_fits(const memest::ServeModel& m, memest::LlamaCppSettings s,
                               memest::ServeFitTarget t, std::uint64_t per_request,
                               std::uint64_t total, std::uint64_t value) {
  try {
    if (t == memest::ServeFitTarget::context) {
      s.ctx_size = value;
    } else {
      s.parallel = value;
      s.ctx_size = value * per_request;
    }
    const memest::ServeEstimate e = memest::estimate_llama_cpp(m, s);
    return *e.weights_bytes + e.kv_bytes + e.compute_buffer_bytes.value_or(0) <= total;
  } catch (const memest::Error&) {
    return std::nullopt;
  }
}

// Whether SGLang's plain estimate at `value` fits, by hand: one request of --context-length
// tokens fits its pool (context), or --max-running-requests requests of context_length do.
std::optional<bool> sglang_fits(const memest::ServeModel& m, memest::SglangSettings s,
                                memest::ServeFitTarget t, std::uint64_t value) {
  try {
    if (t == memest::ServeFitTarget::context) {
      s.context_length = value;
      return memest::estimate_sglang(m, s).kv_tokens >= value;
    }
    s.max_running_requests = value;
    const memest::ServeEstimate e = memest::estimate_sglang(m, s);
    return e.kv_tokens >= value * e.context;
  } catch (const memest::Error&) {
    return std::nullopt;  // SGLang does not start at all
  }
}

// The property: the answer fits and the next value does not; no answer when 1 does not fit.
template <typename Fits>
void check_row(const memest::ServeFitRow& row, std::uint64_t limit, Fits fits) {
  if (!row.best) {
    CHECK(fits(1) != std::optional<bool>(true));
    return;
  }
  CHECK(*row.best <= limit);
  CHECK(fits(*row.best) == std::optional<bool>(true));
  if (*row.best < limit) CHECK(fits(*row.best + 1) != std::optional<bool>(true));
}

}  // namespace

TEST_CASE("serve --fit: the answer fits and one more does not (vLLM, random)", "[serve][fit]") {
  const auto& models = serve_presets();
  REQUIRE(models.size() > 20);
  std::mt19937_64 rng(24);
  const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::uint64_t answered = 0;
  std::uint64_t bounded = 0;
  for (int i = 0; i < 120; ++i) {
    const memest::ServeModel& m = models[pick(0, models.size() - 1)];
    memest::VllmSettings s;
    s.total_memory = pick(8, 200) << 30;
    s.gpu_memory_utilization = 0.5 + 0.05 * static_cast<double>(pick(0, 9));
    s.tensor_parallel_size = std::uint64_t{1} << pick(0, 3);
    if (m.spec.arch->num_heads % s.tensor_parallel_size != 0) s.tensor_parallel_size = 1;
    s.block_size = pick(0, 1) ? 16 : 32;
    s.kv_cache_dtype = pick(0, 1) ? "auto" : "fp8";
    if (!m.spec.checkpoint_quant && pick(0, 1)) s.quantization = "fp8";
    s.max_num_batched_tokens = pick(0, 1) ? 8192 : 2048;
    s.max_num_seqs =
        std::min<std::uint64_t>(s.max_num_batched_tokens, std::uint64_t{1} << pick(0, 10));
    s.max_model_len = pick(256, m.max_positions);
    const auto target =
        pick(0, 1) ? memest::ServeFitTarget::context : memest::ServeFitTarget::concurrency;
    const std::uint64_t limit =
        target == memest::ServeFitTarget::context ? m.max_positions : s.max_num_batched_tokens;
    INFO(m.spec.name << " total " << s.total_memory << " tp " << s.tensor_parallel_size << " kv "
                     << s.kv_cache_dtype << " q " << s.quantization << " target "
                     << (target == memest::ServeFitTarget::context ? "context" : "concurrency"));
    const memest::ServeFitRow row = memest::fit_serve_row(memest::vllm_probe(m, s, target), limit);
    check_row(row, limit, [&](std::uint64_t v) { return vllm_fits(m, s, target, v); });
    if (row.best) ++answered;
    if (row.best && *row.best < limit) ++bounded;
  }
  // The draw reaches every branch: answers at the boundary, at the bound and none.
  CHECK(bounded > 10);
  CHECK(answered > bounded);
  CHECK(answered < 120);
}

TEST_CASE("serve --fit: the answer fits and one more does not (SGLang, random)",
          "[serve][fit][sglang]") {
  const auto& models = serve_presets();
  std::mt19937_64 rng(25);
  const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::uint64_t answered = 0;
  std::uint64_t bounded = 0;
  for (int i = 0; i < 120; ++i) {
    const memest::ServeModel& m = models[pick(0, models.size() - 1)];
    memest::SglangSettings s;
    s.total_memory = pick(8, 200) << 30;
    if (pick(0, 1)) s.mem_fraction_static = 0.5 + 0.05 * static_cast<double>(pick(0, 9));
    s.tp_size = std::uint64_t{1} << pick(0, 3);
    if (m.spec.arch->num_heads % s.tp_size != 0) s.tp_size = 1;
    s.page_size = pick(0, 1) ? 1 : 64;
    s.kv_cache_dtype = pick(0, 1) ? "auto" : "fp8_e4m3";
    if (!m.spec.checkpoint_quant && pick(0, 1)) s.quantization = "fp8";
    s.context_length = pick(256, m.max_positions);
    const auto target =
        pick(0, 1) ? memest::ServeFitTarget::context : memest::ServeFitTarget::concurrency;
    const std::uint64_t limit = target == memest::ServeFitTarget::context ? m.max_positions : 4096;
    INFO(m.spec.name << " total " << s.total_memory << " tp " << s.tp_size << " kv "
                     << s.kv_cache_dtype << " q " << s.quantization << " page " << s.page_size);
    const memest::ServeFitRow row =
        memest::fit_serve_row(memest::sglang_probe(m, s, target), limit);
    check_row(row, limit, [&](std::uint64_t v) { return sglang_fits(m, s, target, v); });
    if (row.best) ++answered;
    if (row.best && *row.best < limit) ++bounded;
  }
  CHECK(bounded > 10);
  CHECK(answered > bounded);
  CHECK(answered < 120);
}

TEST_CASE("serve --fit: the answer fits and one more does not (llama.cpp, random)",
          "[serve][fit]") {
  const auto& models = serve_presets();
  std::mt19937_64 rng(2024);
  const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  const std::vector<std::string> types = {"F16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS"};
  const std::vector<std::string> caches = {"f16", "q8_0", "q4_0", "q5_1", "iq4_nl"};
  std::uint64_t bounded = 0;
  for (int i = 0; i < 120; ++i) {
    const memest::ServeModel& m = models[pick(0, models.size() - 1)];
    memest::LlamaCppSettings s;
    s.quantization = types[pick(0, types.size() - 1)];
    s.flash_attn = pick(0, 1) == 1;
    s.cache_type_k = caches[pick(0, caches.size() - 1)];
    s.cache_type_v = s.flash_attn ? caches[pick(0, caches.size() - 1)] : "f16";
    s.ubatch_size = pick(0, 1) ? 512 : 128;
    const std::uint64_t total = pick(4, 160) << 30;
    const auto target =
        pick(0, 1) ? memest::ServeFitTarget::context : memest::ServeFitTarget::concurrency;
    const std::uint64_t per_request = pick(1, 64) * 256;
    const std::uint64_t limit =
        target == memest::ServeFitTarget::context ? m.max_positions : 0xFFFFFFFFULL / per_request;
    INFO(m.spec.name << " " << s.quantization << " K " << s.cache_type_k << " V " << s.cache_type_v
                     << " fa " << s.flash_attn << " total " << total);
    const memest::LlamaCppEstimateFn estimate = [&m](const memest::LlamaCppSettings& t) {
      return memest::estimate_llama_cpp(m, t);
    };
    const memest::ServeFitRow row = memest::fit_serve_row(
        memest::llama_cpp_probe(estimate, s, target, per_request, total), limit);
    check_row(row, limit,
              [&](std::uint64_t v) { return llama_fits(m, s, target, per_request, total, v); });
    if (row.best && *row.best < limit) ++bounded;
  }
  CHECK(bounded > 10);
}

TEST_CASE("serve --fit: answers derived by hand from the KV bytes per token", "[serve][fit]") {
  // Llama-3.1-8B: 32 layers x 8 kv heads x 128 x (k, v) x 2 bytes = 128 KiB a token, so 1 GiB
  // of KV cache is 512 blocks of 16 tokens: one request of 8,192 tokens fits, 8,193 needs 513.
  const Json ctx = memest::test::run_json(
      {"serve", "--model", "llama-3.1-8b", "--kv-cache-memory", "1GiB", "--fit", "context"});
  REQUIRE(ctx["rows"].size() == 4);  // bf16 and --quantization fp8, by auto and fp8 KV
  CHECK(ctx["rows"][0]["best"] == 8192);
  CHECK(ctx["rows"][0]["past_best"]["need_bytes"] == 513 * 16 * 131072);
  CHECK(ctx["rows"][1]["kv_cache"] == "fp8");
  CHECK(ctx["rows"][1]["best"] == 16384);  // one byte a value
  CHECK(ctx["rows"][2]["weights"] == "fp8");
  CHECK(ctx["rows"][2]["best"] == 8192);  // the KV memory was given: weights do not matter
  // Requests of 1,024 tokens take 64 blocks: 8 of them at once, 16 with an fp8 cache.
  const Json seqs =
      memest::test::run_json({"serve", "--model", "llama-3.1-8b", "--kv-cache-memory", "1GiB",
                              "--max-model-len", "1024", "--fit", "concurrency"});
  CHECK(seqs["searched"] == "max_num_seqs");
  CHECK(seqs["held"]["value"] == 1024);
  CHECK(seqs["rows"][0]["best"] == 8);
  CHECK(seqs["rows"][1]["best"] == 16);
}

TEST_CASE("serve --fit: llama.cpp compares weight formats by KV-cache types", "[serve][fit]") {
  const auto r = run_cli({"serve", "--engine", "llama.cpp", "--model", "qwen3-8b", "--gpu-memory",
                          "16GiB", "--fit", "context", "--format", "json"});
  REQUIRE(r.code == 0);
  const Json j = Json::parse(r.out);
  REQUIRE(j["rows"].size() == 15);  // F16, Q8_0, Q6_K, Q5_K_M, Q4_K_M by f16, q8_0, q4_0
  CHECK(j["searched"] == "ctx_size");
  CHECK(j["rows"][1]["flags"].back() == "--flash-attn");  // a q8_0 V cache needs it
  // Smaller weights and smaller cache blocks leave room for a longer context, never a shorter.
  const auto best = [&](std::size_t i) {
    return j["rows"][i]["best"].is_null() ? 0 : j["rows"][i]["best"].get<std::uint64_t>();
  };
  for (std::size_t w = 0; w + 1 < 5; ++w) CHECK(best(3 * w) <= best(3 * (w + 1)));
  CHECK(best(12) <= best(13));
  CHECK(best(13) <= best(14));
  // Each row's figures at its answer add up within the device.
  for (const Json& row : j["rows"]) {
    if (row["best"].is_null()) continue;
    const Json& at = row["at_best"];
    CHECK(at["weights"]["bytes"].get<std::uint64_t>() +
              at["kv_cache"]["bytes"].get<std::uint64_t>() +
              at["compute_buffer"]["bytes"].get<std::uint64_t>() ==
          at["need_bytes"].get<std::uint64_t>());
    CHECK(at["need_bytes"].get<std::uint64_t>() <= (std::uint64_t{16} << 30));
  }
  // The table says the same in words; markdown wraps it in a text block.
  const auto md =
      run_cli({"serve", "--engine", "llama.cpp", "--model", "qwen3-8b", "--gpu-memory", "16GiB",
               "--fit", "context", "--quantization", "Q4_K_M", "--format", "markdown"});
  REQUIRE(md.code == 0);
  CHECK(md.out.starts_with("```text\nmodel      qwen3-8b (llama.cpp"));
  CHECK(md.out.find("\nQ4_K_M ") != std::string::npos);
  CHECK(md.out.ends_with("```\n"));
}

TEST_CASE("serve --fit: refusals and nothing that fits", "[serve][fit]") {
  const auto expect = [](std::vector<std::string> args, const std::string& line) {
    args.insert(args.begin(), "serve");
    const auto r = run_cli(args);
    CHECK(r.code == 2);
    CHECK(r.err == "memest: error: " + line + "\n");
  };
  expect({"--model", "llama-3.1-8b", "--fit", "context", "--max-model-len", "4096"},
         "--max-model-len: --fit context searches it (give --max N to bound the search)");
  expect({"--engine", "llama.cpp", "--model", "llama-3.1-8b", "--fit", "concurrency", "--parallel",
          "4"},
         "--parallel: --fit concurrency searches it (give --max N to bound the search)");
  expect({"--model", "llama-3.1-8b", "--max", "4096"},
         "--max: bounds the search of --fit (give --fit context or --fit concurrency)");
  expect({"--model", "llama-3.1-8b", "--fit", "concurrency", "--max", "9000"},
         "--max: vLLM refuses a max_num_seqs above max_num_batched_tokens (8192)");
  expect({"--model", "llama-3.1-8b", "--fit", "tokens"},
         "--fit: \"tokens\" is not offered (expected one of: context, concurrency)");
  const auto refused = run_cli({"fit", "--serve", "--model", "llama-3.1-8b"});
  CHECK(refused.code == 2);
  CHECK(refused.err ==
        "memest: error: fit --serve: serving is memest serve --fit context|concurrency (memest "
        "serve --help)\n");
  // A 72B model in bf16 on one 80 GB device: no row starts; each says why; exit 1.
  const auto none = run_cli({"serve", "--model", "qwen2.5-72b-instruct", "--fit", "context"});
  CHECK(none.code == 1);
  CHECK(none.out.find("none") != std::string::npos);
  CHECK(none.out.find("note: bf16 / auto: serve: no memory left for the KV cache") !=
        std::string::npos);
}

namespace {

std::uint64_t held_sum(const std::vector<memest::ServeHeldPart>& parts) {
  std::uint64_t sum = 0;
  for (const auto& p : parts) sum += p.bytes;
  return sum;
}

// The parts in ServeHeld's order, each kind once (the bar's left-to-right order).
bool held_in_order(const std::vector<memest::ServeHeldPart>& parts) {
  for (std::size_t i = 1; i < parts.size(); ++i) {
    if (parts[i - 1].part >= parts[i].part) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("serve --fit: what a row's device holds (--plot's bar) is within the budget",
          "[serve][fit][plot]") {
  const auto& models = serve_presets();
  std::mt19937_64 rng(3);
  const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  std::uint64_t fitted = 0;
  for (int i = 0; i < 40; ++i) {
    const memest::ServeModel& m = models[pick(0, models.size() - 1)];
    memest::VllmSettings s;
    s.total_memory = pick(8, 160) << 30;
    s.kv_cache_dtype = pick(0, 1) ? "auto" : "fp8";
    s.max_num_batched_tokens = 2048;
    s.max_num_seqs = 256;
    s.max_model_len = pick(256, m.max_positions);
    const auto target =
        pick(0, 1) ? memest::ServeFitTarget::context : memest::ServeFitTarget::concurrency;
    const std::uint64_t limit =
        target == memest::ServeFitTarget::context ? m.max_positions : s.max_num_batched_tokens;
    INFO(m.spec.name << " total " << s.total_memory);
    const memest::ServeFitRow row = memest::fit_serve_row(memest::vllm_probe(m, s, target), limit);
    const auto& drawn = row.best ? row.at_best : row.past_best;
    if (!drawn) {
      CHECK(row.held.empty());
      continue;
    }
    CHECK(held_in_order(row.held));
    const memest::ServeEstimate& e = drawn->estimate;
    // The weights, the profile peak and the non-torch memory as the estimate has them; the KV
    // cache split into what the value takes (the probe's need) and the rest of its blocks.
    CHECK(row.held.front().part == memest::ServeHeld::weights);
    CHECK(row.held.front().bytes == *e.weights_bytes);
    const auto kv = std::find_if(row.held.begin(), row.held.end(), [](const auto& p) {
      return p.part == memest::ServeHeld::kv_cache;
    });
    REQUIRE(kv != row.held.end());
    CHECK(kv->bytes == drawn->need);
    if (row.best) {
      ++fitted;
      CHECK(held_sum(row.held) ==
            *e.weights_bytes + *e.activation_peak_bytes + *e.non_torch_bytes + e.kv_bytes);
      CHECK(held_sum(row.held) <= memest::vllm_budget(s));
    } else {
      CHECK(held_sum(row.held) > memest::vllm_budget(s));  // 1 is drawn past the budget
    }
  }
  CHECK(fitted > 5);
  // Qwen2.5-14B with fp8 weights on 22.5 GiB: one request of its 131,072 tokens is past the
  // KV blocks, so the row has no answer and its bar (at 1) passes the budget.
  const memest::ServeModel q = memest::load_serve_model("qwen2.5-14b", "");
  memest::VllmSettings s;
  s.total_memory = std::uint64_t{45} << 29;
  s.quantization = "fp8";
  s.max_num_seqs = 256;
  s.max_num_batched_tokens = 2048;
  const memest::ServeFitRow none =
      memest::fit_serve_row(memest::vllm_probe(q, s, memest::ServeFitTarget::concurrency), 2048);
  CHECK_FALSE(none.best);
  REQUIRE(none.past_best);
  CHECK(held_sum(none.held) > memest::vllm_budget(s));
}

TEST_CASE("serve --fit: llama.cpp's bar is the probe's need", "[serve][fit][plot]") {
  const memest::ServeModel m = memest::load_serve_model("llama-3.1-8b", "");
  memest::LlamaCppSettings s;
  s.quantization = "Q4_K_M";
  const std::uint64_t total = std::uint64_t{12} << 30;
  const memest::LlamaCppEstimateFn estimate = [&m](const memest::LlamaCppSettings& t) {
    return memest::estimate_llama_cpp(m, t);
  };
  const memest::ServeFitRow row = memest::fit_serve_row(
      memest::llama_cpp_probe(estimate, s, memest::ServeFitTarget::context, 0, total),
      m.max_positions);
  REQUIRE(row.best);
  REQUIRE(*row.best < m.max_positions);  // the device bounds it, not the model
  CHECK(held_in_order(row.held));
  CHECK(row.held.size() == 3);  // weights, compute buffer, KV cache
  CHECK(held_sum(row.held) == row.at_best->need);
  CHECK(held_sum(row.held) <= total);
}

TEST_CASE("serve --fit --plot: SGLang's bars against mem_fraction_static x total",
          "[serve][fit][plot][sglang]") {
  const memest::ServeModel m = memest::load_serve_model("qwen3-8b", "");
  memest::SglangSettings s;
  s.total_memory = std::uint64_t{48} << 30;
  s.context_length = 40960;
  const memest::ServeFitRow row =
      memest::fit_serve_row(memest::sglang_probe(m, s, memest::ServeFitTarget::concurrency), 4096);
  REQUIRE(row.best);
  REQUIRE(row.at_best);
  const memest::ServeEstimate& e = row.at_best->estimate;
  // The pool is allocated at start: the requests' part is the probe's need, the rest free.
  REQUIRE(row.held.size() == 3);
  CHECK(row.held[0].part == memest::ServeHeld::weights);
  CHECK(row.held[0].bytes == *e.weights_bytes);
  CHECK(row.held[1].part == memest::ServeHeld::kv_cache);
  CHECK(row.held[1].bytes == *row.best * 40960 * e.kv_bytes_per_token);
  CHECK(row.held[2].part == memest::ServeHeld::kv_cache_free);
  CHECK(held_sum(row.held) == *e.weights_bytes + e.kv_bytes);
  // The picture's line is SGLang's budget, named by its own flag.
  memest::test::TempDir dir("serve-sglang-plot");
  const std::string svg = (dir.path / "fit.svg").string();
  const auto r =
      run_cli({"serve", "--engine", "sglang", "--model", "qwen3-8b", "--gpu-memory", "48GiB",
               "--context-length", "40960", "--fit", "concurrency", "--plot", svg});
  REQUIRE(r.code == 0);
  const std::string text = memest::test::read_file(svg);
  CHECK(text.find("qwen3-8b on SGLang") != std::string::npos);
  CHECK(text.find("mem_fraction_static x") != std::string::npos);
  CHECK(text.find(fmt::format("class=\"budget\" data-bytes=\"{}\"", memest::sglang_budget(s))) !=
        std::string::npos);
}
