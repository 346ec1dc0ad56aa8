#pragma once
// Runs memest on the published GPU measurements of tests/data/gpu/cases.jsonl with the flags a
// user would type (tests/data/gpu/runs.jsonl) and compares the figure the case measured:
// allocated or active bytes (the last pipeline stage when there are stages), reserved bytes, or
// nvidia-smi's used memory (reserved plus the stated CUDA context). Shared by gpu_cases_test.cpp
// and the program that writes docs/accuracy.md (accuracy_report.cpp).

#include "truth_cases.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace memest::gpu {

using nlohmann::json;

/// One published run: what it measured and how memest is asked about it.
struct Run {
  std::string id;
  std::vector<std::string> args;  ///< the flags a user would type
  std::string reads;              ///< allocated, active, reserved or nvidia-smi
  double held = 0;                ///< the |error| the test holds this run to
  std::uint64_t measured = 0;     ///< bytes, from the case record
  std::string metric;             ///< the case's own words for what it measured
};

/// The runs of `root`/tests/data/gpu/`file`, each joined with its measured case.
inline std::vector<Run> load_runs(const std::string& root, const std::string& file = "runs.jsonl") {
  std::map<std::string, json> cases;
  for (const auto& c : truth::load_cases(root + "/tests/data/gpu/cases.jsonl"))
    cases[c["id"].get<std::string>()] = c;
  std::vector<Run> runs;
  for (const auto& r : truth::load_cases(root + "/tests/data/gpu/" + file)) {
    Run run{r["id"], r["args"], r["reads"], r["held"].get<double>(), 0, ""};
    const json& m = cases.at(run.id)["measured"];
    run.measured = m["bytes"].get<std::uint64_t>();
    run.metric = m["metric"].get<std::string>();
    for (auto& a : run.args)  // data files are named from the repository root
      if (a.starts_with("tests/")) a = root + "/" + a;
    runs.push_back(std::move(run));
  }
  return runs;
}

/// The bytes memest gives for what the run measured.
inline std::uint64_t estimated(const Run& run, const json& j) {
  const json& peak = j["peak"];
  if (run.reads == "reserved") return peak.at("reserved_bytes").get<std::uint64_t>();
  if (run.reads == "nvidia-smi") return peak.at("nvidia_smi_bytes").get<std::uint64_t>();
  if (run.reads != "allocated" && run.reads != "active")
    throw std::runtime_error(run.id + ": unknown metric " + run.reads);
  // A split run measured on its last rank: the last pipeline stage. The replay's allocated
  // bytes with --allocator cuda, else the live peak.
  const json& stages = j["stages"];
  const json& on = stages.empty() ? peak : stages.back();
  const json& allocated = on["allocated_bytes"];
  if (!allocated.is_null()) return allocated.get<std::uint64_t>();
  return on[stages.empty() ? "bytes" : "peak_bytes"].get<std::uint64_t>();
}

/// memest's JSON document for the run (its own flags plus --format json).
inline json estimate(const Run& run) {
  std::vector<std::string> args = {"memest"};
  args.insert(args.end(), run.args.begin(), run.args.end());
  args.insert(args.end(), {"--format", "json"});
  return truth::cli_json(args, run.id);
}

struct Result {
  Run run;
  std::uint64_t estimate = 0;
  double error = 0;  ///< signed, estimate / measured - 1
};

inline std::vector<Result> results(const std::string& root) {
  std::vector<Result> out;
  for (auto& run : load_runs(root)) {
    const std::uint64_t e = estimated(run, estimate(run));
    const double err = static_cast<double>(e) / static_cast<double>(run.measured) - 1;
    out.push_back({std::move(run), e, err});
  }
  return out;
}

/// The median of |error|, the share within 10% and the largest |error|.
struct Summary {
  double median = 0, within10 = 0, worst = 0;
};

inline Summary summarise(const std::vector<Result>& rs) {
  std::vector<double> e;
  for (const auto& r : rs) e.push_back(std::abs(r.error));
  std::sort(e.begin(), e.end());
  if (e.empty()) return {};
  const std::size_t n = e.size();
  const double median = n % 2 ? e[n / 2] : (e[n / 2 - 1] + e[n / 2]) / 2;
  const auto within = std::count_if(e.begin(), e.end(), [](double x) { return x <= 0.10; });
  return {median, static_cast<double>(within) / static_cast<double>(n), e.back()};
}

inline std::string command_line(const Run& run, const std::string& root) {
  std::string s = "memest";
  for (auto a : run.args) {
    if (a.starts_with(root + "/")) a = a.substr(root.size() + 1);
    s += " " + a;
  }
  return s;
}

/// The markdown table of docs/accuracy.md's GPU section, then a summary line.
inline std::string gpu_table(const std::string& root) {
  const auto rs = results(root);
  std::string out = "| case | metric | memest | measured | error |\n|---|---|---:|---:|---:|\n";
  for (const auto& r : rs)
    out += fmt::format("| {} | {} | {:.2f} GB | {:.2f} GB | {:+.1f}% |\n", r.run.id, r.run.reads,
                       static_cast<double>(r.estimate) / 1e9,
                       static_cast<double>(r.run.measured) / 1e9, r.error * 100);
  const Summary s = summarise(rs);
  out += fmt::format(
      "\n{} runs: median |error| {:.1f}%, {:.0f}% within 10%, largest |error| {:.1f}%.\n\n"
      "<details><summary>The command of each run</summary>\n\n",
      rs.size(), s.median * 100, s.within10 * 100, s.worst * 100);
  for (const auto& r : rs)
    out += fmt::format("* `{}`: `{}`\n", r.run.id, command_line(r.run, root));
  return out + "\n</details>\n";
}

inline constexpr const char* kBegin = "<!-- gpu-table: generated by memest_accuracy_report -->\n";
inline constexpr const char* kEnd = "<!-- /gpu-table -->\n";

}  // namespace memest::gpu
