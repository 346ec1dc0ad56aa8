#pragma once
// Runs memest on the measured PyTorch steps of tests/data/truth/cases.jsonl through the CLI
// (JSON output), as the acceptance check does. Shared by truth_test.cpp and the program that
// writes docs/accuracy.md (accuracy_report.cpp).

#include "cli/cli.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace memest::truth {

using nlohmann::json;

/// The measured cases, one JSON object per line.
inline std::vector<json> load_cases(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<json> cases;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) cases.push_back(json::parse(line));
  }
  return cases;
}

/// The case's precision and optimizer as memest spells them.
inline std::string precision_flag(const std::string& p) {
  if (p == "fp32") return "fp32";
  if (p == "autocast-bf16") return "amp-bf16";
  if (p == "bf16") return "bf16";
  if (p == "master-bf16") return "mixed-bf16";
  throw std::runtime_error("unknown precision " + p);
}
inline std::string optimizer_flag(const std::string& o) {
  return o == "sgd+momentum" ? "sgd-momentum" : o;
}

/// memest's flags for a case whose config was written to `config_path`.
inline std::vector<std::string> case_args(const json& c, const std::string& config_path) {
  const auto& t = c["training"];
  std::vector<std::string> args = {"memest",
                                   "--config",
                                   config_path,
                                   "--batch",
                                   std::to_string(t["batch"].get<std::uint64_t>()),
                                   "--seq",
                                   std::to_string(t["seq"].get<std::uint64_t>()),
                                   "--optimizer",
                                   optimizer_flag(t["optimizer"]),
                                   "--precision",
                                   precision_flag(t["precision"]),
                                   "--device",
                                   "cpu",
                                   "--attention",
                                   "eager",
                                   "--format",
                                   "json"};
  if (t["checkpointing"].get<bool>()) {
    args.push_back("--recompute");
    args.push_back("full");
  }
  return args;
}

/// The CLI run in-process on `args` (argv, "memest" first): its JSON output; a run that does not
/// exit 0 throws, naming `what`.
inline json cli_json(const std::vector<std::string>& args, const std::string& what) {
  std::ostringstream out, err;
  const int code = cli::run(args, out, err);
  if (code != 0) throw std::runtime_error(fmt::format("{}: exit {}: {}", what, code, err.str()));
  return json::parse(out.str());
}

/// Runs memest in-process on a case whose config is written to a file for it, with the flags
/// `args_of(case, path)`; returns its JSON output and throws on a non-zero exit.
template <typename ArgsOf>
json run_with_config(const json& c, ArgsOf args_of) {
  // One folder per process: ctest runs the truth tests in parallel processes, and one must not
  // truncate a config another is reading.
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("memest-truth-{}", getpid());
  std::filesystem::create_directories(dir);
  const auto path = (dir / (c["id"].get<std::string>() + ".json")).string();
  std::ofstream(path) << c["config"].dump();
  try {
    json j = cli_json(args_of(c, path), c["id"].get<std::string>());
    std::filesystem::remove_all(dir);
    return j;
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
}

/// Runs memest on one case in-process and returns its JSON output; throws on a non-zero exit.
inline json run_case(const json& c) { return run_with_config(c, case_args); }

/// Signed relative error in percent.
inline double error_pct(std::uint64_t estimate, std::uint64_t measured) {
  return 100.0 * (static_cast<double>(estimate) - static_cast<double>(measured)) /
         static_cast<double>(measured);
}

/// The markdown table of docs/accuracy.md: one row per case, then a summary line.
inline std::string accuracy_table(const std::string& cases_path) {
  std::string out =
      "| case | activations est. | measured | error | peak est. | measured | error | phase est. / "
      "measured | peak moment |\n|---|---:|---:|---:|---:|---:|---:|---|---|\n";
  std::size_t n = 0, exact_a = 0, exact_p = 0, phases = 0;
  double worst_a = 0, worst_p = 0;
  for (const auto& c : load_cases(cases_path)) {
    const json j = run_case(c);
    const auto& m = c["pytorch2"];
    const auto a = j["categories"]["activations"]["bytes"].get<std::uint64_t>();
    const auto p = j["peak"]["bytes"].get<std::uint64_t>();
    const auto ma = m["activations_saved_bytes"].get<std::uint64_t>();
    const auto mp = m["peak_bytes"].get<std::uint64_t>();
    const double ea = error_pct(a, ma), ep = error_pct(p, mp);
    ++n;
    exact_a += a == ma;
    exact_p += p == mp;
    phases += j["peak"]["phase"] == m["peak_phase"];
    worst_a = std::max(worst_a, std::abs(ea));
    worst_p = std::max(worst_p, std::abs(ep));
    out += fmt::format("| {} | {} | {} | {:.3f}% | {} | {} | {:.3f}% | {} / {} | {} |\n",
                       c["id"].get<std::string>(), a, ma, ea, p, mp, ep,
                       j["peak"]["phase"].get<std::string>(), m["peak_phase"].get<std::string>(),
                       j["peak"]["moment"].get<std::string>());
  }
  out += fmt::format(
      "\nActivations exact in {}/{} cases, peaks exact in {}/{}, phases {}/{}; worst error "
      "{:.3f}% (activations), {:.3f}% (peak).\n",
      exact_a, n, exact_p, n, phases, n, worst_a, worst_p);
  return out;
}

inline constexpr const char* kBegin =
    "<!-- accuracy-table: generated by memest_accuracy_report -->\n";
inline constexpr const char* kEnd = "<!-- /accuracy-table -->\n";

/// `doc` with the text between the markers `begin` and `end` replaced by `table`.
inline std::string with_table(const std::string& doc, const std::string& table,
                              const std::string& begin = kBegin, const std::string& end = kEnd) {
  const auto b = doc.find(begin);
  const auto e = doc.find(end);
  if (b == std::string::npos || e == std::string::npos || e < b) {
    throw std::runtime_error("docs/accuracy.md: table markers missing: " + begin);
  }
  const auto start = b + begin.size();
  return doc.substr(0, start) + table + doc.substr(e);
}

}  // namespace memest::truth
