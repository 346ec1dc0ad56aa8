#pragma once
// Runs memest serve on the published start-up logs of tests/data/inference/cases.jsonl with the
// launch lines of tests/data/inference/runs.jsonl and compares every printed figure memest
// gives: vLLM's weights, profile peak, non-torch memory, KV bytes, blocks, tokens and maximum
// concurrency; llama.cpp's weights, KV cache and compute buffer, per device where the log prints
// them. Shared by the serve tests (serve_cases_test.cpp, serve_vllm_test.cpp,
// serve_llama_cpp_test.cpp) and the program that writes docs/accuracy.md (accuracy_report.cpp).

#include "truth_cases.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

namespace memest::serve_cases {

using nlohmann::json;

/// One published log and memest's launch line for it.
struct Run {
  std::string id;
  std::string engine;                       ///< vllm, or llama.cpp (ik_llama.cpp's logs too)
  std::vector<std::string> args;            ///< memest serve's flags, the engine's own names
  std::vector<std::string> unmet;           ///< figures (what or what@device) outside their bound
  std::map<std::string, std::string> skip;  ///< printed figures not compared, and why
  json log;                                 ///< the case record of cases.jsonl
};

/// The runs of `root`/tests/data/inference/runs.jsonl, each joined with its case. vLLM's runs
/// take the sweep's settings from the case: the GPU's total as the log prints it, the
/// utilization and the context.
inline std::vector<Run> load_runs(const std::string& root) {
  std::map<std::string, json> cases;
  for (const auto& c : truth::load_cases(root + "/tests/data/inference/cases.jsonl"))
    cases[c["id"].get<std::string>()] = c;
  std::vector<Run> runs;
  for (const auto& r : truth::load_cases(root + "/tests/data/inference/runs.jsonl")) {
    Run run{r["id"],
            "",
            r["args"],
            r.value("unmet", std::vector<std::string>{}),
            r.value("skip", std::map<std::string, std::string>{}),
            cases.at(r["id"])};
    run.engine = run.log["engine"] == "vllm" ? "vllm" : "llama.cpp";
    for (auto& a : run.args)  // data files are named from the repository root
      if (a.starts_with("tests/")) a = root + "/" + a;
    if (run.engine == "vllm") {
      const json& s = run.log["settings"];
      run.args.insert(
          run.args.end(),
          {"--gpu-memory", fmt::format("{}GiB", s["gpu_total_memory_reported_GiB"].get<double>()),
           "--gpu-memory-utilization", fmt::format("{}", s["gpu_memory_utilization"].get<double>()),
           "--max-model-len", fmt::format("{}", s["max_model_len"].get<int>())});
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

/// memest serve's argv for the run, `extra` flags added, "--format json" last.
inline std::vector<std::string> argv(const Run& run, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"memest", "serve", "--engine", run.engine};
  a.insert(a.end(), run.args.begin(), run.args.end());
  a.insert(a.end(), extra.begin(), extra.end());
  a.insert(a.end(), {"--format", "json"});
  return a;
}

/// memest's JSON document for the run.
inline json estimate(const Run& run, const std::vector<std::string>& extra = {}) {
  return truth::cli_json(argv(run, extra), run.id);
}

/// A printed figure as this table names it and the bound the issue holds it to (0: none).
struct Kind {
  const char* what;
  const char* label;
  const char* key;  ///< the JSON object of memest's figure, or "" for a value at the top
  double bound;
};

// data table
inline constexpr Kind kKinds[] = {
    {"weights_bytes", "weights", "weights", 0.02},
    {"weights_bytes_device", "weights", "weights", 0.02},
    {"weights_bytes_host", "weights (host)", "weights", 0.02},
    {"activation_peak_bytes", "profile peak", "activations", 0.20},
    {"non_torch_forward_bytes", "non-torch", "non_torch", 0},
    {"kv_cache_bytes", "KV bytes", "kv_cache", 0.02},
    {"kv_cache_bytes_device", "KV bytes", "kv_cache", 0.02},
    {"kv_buffer_bytes_device", "KV bytes", "kv_cache", 0.02},
    {"kv_buffer_bytes_host", "KV bytes (host)", "kv_cache", 0.02},
    {"gpu_blocks", "KV blocks", "kv_cache", 0.02},
    {"kv_cache_tokens", "KV tokens", "kv_cache", 0.02},
    {"max_concurrency", "max concurrency", "", 0.02},
    {"compute_buffer_bytes", "compute buffer", "compute_buffer", 0.20},
    {"compute_buffer_host_bytes", "compute buffer (host)", "compute_buffer", 0.20},
};

/// Why a printed figure memest has no counterpart of is not compared.
// data table
inline const std::map<std::string, std::string> kNotModelled = {
    {"non_kv_total_bytes", "the sum of weights, profile peak and non-torch, each compared"},
    {"cuda_graph_bytes", "the driver's memory per captured graph: not modelled"},
    {"kv_k_bytes", "K alone: memest gives K and V together"},
    {"kv_v_bytes", "V alone: memest gives K and V together"},
    {"vram_scratch_bytes", "build 1707's VRAM scratch buffer: not modelled"},
    {"total_vram_bytes", "build 1707's VRAM total, its scratch buffer included"},
    {"weights_bytes_split", "a row split's weights: not modelled"},
    {"process_gpu_memory", "nvidia-smi's process figure, the CUDA context included: not modelled"},
};

inline const Kind* kind_of(const std::string& what) {
  for (const Kind& k : kKinds)
    if (what == k.what) return &k;
  return nullptr;
}

/// The figure's name in runs.jsonl's "unmet" and "skip": what, or what@device.
inline std::string figure_name(const json& m) {
  const std::string what = m["what"];
  return m.contains("device") ? what + "@" + m["device"].get<std::string>() : what;
}

/// The object of memest's document that holds the figures of the printed figure's device: a
/// device of "per_device", "host", or the document itself (one device, or the fullest).
inline const json& placed(const json& j, const json& m) {
  const std::string what = m["what"];
  const std::string dev = m.value("device", "");
  if (what.find("_host") != std::string::npos) return j.at("host");  // kv_buffer_bytes_host, ...
  const bool numbered =
      dev.size() > 4 && dev.starts_with("CUDA") &&
      std::all_of(dev.begin() + 4, dev.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
  if (numbered && j.contains("per_device")) return j["per_device"].at(std::stoul(dev.substr(4)));
  return j;
}

/// memest's value of the printed figure `m`: bytes, tokens, blocks or requests.
inline double memest_value(const json& j, const json& m) {
  const std::string what = m["what"];
  if (what == "max_concurrency") return j.at("max_concurrency").get<double>();
  if (what == "kv_cache_tokens") return j["kv_cache"].at("tokens").get<double>();
  if (what == "gpu_blocks") return j["kv_cache"].at("blocks").get<double>();
  if (what == "activation_peak_bytes") return j["activations"].at("peak_bytes").get<double>();
  if (what == "kv_cache_bytes" && !m.contains("device") && j.contains("per_device")) {
    double sum = j["host"]["kv_cache"].value("bytes", 0.0);  // every layer's, wherever it is
    for (const json& d : j["per_device"]) sum += d["kv_cache"]["bytes"].get<double>();
    return sum;
  }
  const json& v = placed(j, m)[kind_of(what)->key].at("bytes");
  if (v.is_null()) throw std::runtime_error("memest gives no " + figure_name(m));
  return v.get<double>();
}

/// The figure as the log printed it, in bytes (or tokens, blocks, requests).
inline double printed_value(const json& m) {
  const bool bytes = m.contains("bytes") && !m["bytes"].is_null();
  return bytes ? m["bytes"].get<double>() : m["value"].get<double>();
}

/// One compared figure.
struct Figure {
  std::string name;  ///< what, or what@device
  const Kind* kind = nullptr;
  std::string device;
  std::string unit;  ///< as printed: GiB, MiB, tokens, blocks, x
  double printed = 0, memest = 0;
  double error = 0;      ///< signed, memest / printed - 1
  bool expected = true;  ///< false where runs.jsonl lists the figure as unmet
  bool met() const { return kind->bound == 0 || std::abs(error) <= kind->bound; }
};

/// A printed figure not compared and why.
struct Skipped {
  std::string name, why;
};

struct Result {
  Run run;
  std::vector<Figure> figures;
  std::vector<Skipped> skipped;
};

inline Result compare(Run run) {
  const json j = estimate(run);
  Result r{std::move(run), {}, {}};
  for (const json& m : r.run.log["measured"]) {
    const std::string name = figure_name(m);
    const Kind* k = kind_of(m["what"]);
    const auto skip = r.run.skip.find(m["what"]);
    if (!k || skip != r.run.skip.end()) {
      const std::string why = k ? skip->second : kNotModelled.at(m["what"]);
      r.skipped.push_back({name, why});
      continue;
    }
    Figure f{name,
             k,
             m.value("device", ""),
             m["unit"].get<std::string>(),
             printed_value(m),
             memest_value(j, m)};
    f.error = f.memest / f.printed - 1;
    const auto& u = r.run.unmet;
    f.expected = std::find(u.begin(), u.end(), name) == u.end() &&
                 std::find(u.begin(), u.end(), m["what"].get<std::string>()) == u.end();
    r.figures.push_back(std::move(f));
  }
  return r;
}

inline std::vector<Result> results(const std::string& root) {
  std::vector<Result> out;
  for (Run& run : load_runs(root)) out.push_back(compare(std::move(run)));
  return out;
}

/// A figure in the unit the log printed it in: GiB and MiB with two decimals, counts whole.
inline std::string in_unit(double v, const std::string& unit) {
  if (unit == "GiB") return fmt::format("{:.2f} GiB", v / (1ULL << 30));
  if (unit == "MiB") return fmt::format("{:.2f} MiB", v / (1ULL << 20));
  if (unit == "x") return fmt::format("{:.2f}x", v);
  return fmt::format("{:.0f} {}", v, unit);
}

/// The run as a user would type it, data files named from the repository root.
inline std::string command_line(const Run& run, const std::string& root) {
  std::string s = run.engine == "vllm" ? "memest serve" : "memest serve --engine " + run.engine;
  for (const std::string& a : run.args)
    s += " " + (a.starts_with(root + "/") ? a.substr(root.size() + 1) : a);
  return s;
}

inline std::string bound_text(const Kind& k) {
  return k.bound == 0 ? "none" : fmt::format("{:.0f}%", k.bound * 100);
}

inline std::string figure_row(const Result& r, const Figure& f) {
  const std::string label =
      f.device.empty() ? f.kind->label : fmt::format("{}, {}", f.kind->label, f.device);
  const char* met = f.kind->bound == 0 ? "-" : f.met() ? "yes" : "**no**";
  return fmt::format("| {} | {} | {} | {} | {} | {:+.1f}% | {} | {} |\n", r.run.id,
                     r.run.log["engine"].get<std::string>(), label, in_unit(f.memest, f.unit),
                     in_unit(f.printed, f.unit), f.error * 100, bound_text(*f.kind), met);
}

/// The markdown table of docs/accuracy.md's serving section, its summary and the figures left.
inline std::string serve_table(const std::string& root) {
  const auto rs = results(root);
  std::string out =
      "| case | engine | figure | memest | printed | error | bound | met |\n"
      "|---|---|---|---:|---:|---:|---:|---|\n";
  std::size_t bounded[2] = {}, met[2] = {};  // vLLM, llama.cpp
  for (const auto& r : rs) {
    const int e = r.run.engine == "vllm" ? 0 : 1;
    for (const auto& f : r.figures) {
      out += figure_row(r, f);
      bounded[e] += f.kind->bound > 0;
      met[e] += f.kind->bound > 0 && f.met();
    }
  }
  out += fmt::format(
      "\n{} cases: {} of {} figures within their bound (vLLM {} of {}, llama.cpp and "
      "ik_llama.cpp {} of {}).\n\n"
      "<details><summary>The command of each case, and the printed figures not compared"
      "</summary>\n\n",
      rs.size(), met[0] + met[1], bounded[0] + bounded[1], met[0], bounded[0], met[1], bounded[1]);
  for (const auto& r : rs) {
    out += fmt::format("* `{}`: `{}`\n", r.run.id, command_line(r.run, root));
    for (const auto& s : r.skipped) out += fmt::format("  * not compared: {}: {}\n", s.name, s.why);
  }
  return out + "\n</details>\n";
}

inline constexpr const char* kBegin = "<!-- serve-table: generated by memest_accuracy_report -->\n";
inline constexpr const char* kEnd = "<!-- /serve-table -->\n";

}  // namespace memest::serve_cases
