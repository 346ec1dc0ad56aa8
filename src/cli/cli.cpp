#include "cli/cli.hpp"

#include <memest/check.hpp>
#include <memest/config.hpp>
#include <memest/error.hpp>
#include <memest/from.hpp>
#include <memest/gpu_support.hpp>
#include <memest/report.hpp>
#include <memest/run_config.hpp>
#include <memest/search.hpp>
#include <memest/serve.hpp>
#include <memest/serve_config.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace memest::cli {
namespace {

constexpr const char* kExamples = R"(
Examples:
  memest --params 7B --optimizer adamw              fp32 training of a 7B model
  memest --params 7B --optimizer adamw --amp        the same under torch.autocast (fp16)
  memest --params 7B --precision mixed-bf16         bf16 model, fp32 master weights and states
  memest --params 7B --precision mixed --grad-dtype fp16 --state-dtype fp16
                                                    the article's 84 GB assumption
  memest --params 7B --format json | jq .total.bytes

Exit codes: 0 ok, 1 a check failed, 2 invalid input, 3 internal error.
Units: GB = 10^9 bytes, GiB = 2^30 bytes.)";

// The subcommands' names, in the order --help lists them.
constexpr std::array<std::string_view, 8> kSubcommands = {"models", "gpus",  "check",  "compare",
                                                          "fit",    "sweep", "schema", "serve"};

// Binds the run option table to flags: each flag writes into stable storage, and after parsing
// the ones that were given become Settings that remember the flag's name for error messages.
class Binder {
 public:
  void bind(CLI::App& app, RunOptions& options) {
    for (const auto& info : run_option_table()) {
      const std::string group = section_heading(info.section);
      if (info.boolean) {
        // Bound to a bool, so that --flag=false is false and --flag=maybe an error (CLI11's
        // flag values), as a run config's false is.
        auto& value = flags_.emplace_back(false);
        auto* opt = app.add_flag(info.flag, value, info.help)->group(group);
        auto* target = &(options.*info.boolean);
        collect_.push_back([opt, &value, target, flag = info.flag] {
          if (opt->count() > 0) *target = Setting<bool>{value, flag};
        });
        continue;
      }
      auto& storage = texts_.emplace_back();
      auto* opt =
          app.add_option(info.flag, storage, info.help)->type_name(info.type_name)->group(group);
      auto* target = &(options.*info.text);
      collect_.push_back([opt, &storage, target, flag = info.flag] {
        if (opt->count() > 0) *target = Setting<std::string>{storage, flag};
      });
    }
  }

  void collect() {
    for (auto& c : collect_) c();
  }

 private:
  static std::string section_heading(const std::string& section) {
    if (section == "model") return "Model (--params, --model or --config)";
    std::string h = section;
    h[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(h[0])));
    return h;
  }

  std::deque<std::string> texts_;
  std::deque<bool> flags_;
  std::vector<std::function<void()>> collect_;
};

std::string joined(std::span<const std::string_view> names) {
  return fmt::format("{}", fmt::join(names, ", "));
}

struct OutputFlags {
  bool color = false;  ///< set by run(): the output is a terminal and NO_COLOR is unset
  bool explain = false;
  std::string file;
  std::vector<std::string> from;  ///< --from FILE [KEY=VALUE ...]
  std::string units = "GB";
  std::string format = "table";
  std::string plot;  ///< --plot FILE.svg
};

void add_output_flags(CLI::App& app, OutputFlags& f) {
  app.add_flag("--explain", f.explain,
               "Show the parameter inventory and the formulas behind each figure")
      ->group("Output");
  app.add_option("--file", f.file, "A run config (JSON); flags override its settings")
      ->type_name("PATH")
      ->group("Run config");
  app.add_option(
         "--from", f.from,
         "A training framework's config file (torchtune, LitGPT, axolotl or accelerate YAML, "
         "torchtitan TOML, Megatron-LM arguments, DeepSpeed or TrainingArguments JSON), then "
         "its overrides as KEY=VALUE; flags override it (docs/from.md)")
      ->type_name("FILE [KEY=VALUE ...]")
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->group("Run config");
  app.add_option("--units", f.units,
                 "Units of the table: " + joined(unit_names()) + " (default GB)")
      ->type_name("UNIT")
      ->group("Output");
  app.add_option("--format", f.format,
                 "Output format: table, json, markdown (sweep: csv, jsonl; default table)")
      ->type_name("FORMAT")
      ->group("Output");
  app.add_option("--plot", f.plot,
                 "Also draw an SVG picture to FILE: live memory over the step (an estimate), or "
                 "need against batch or sequence (sweep)")
      ->type_name("FILE")
      ->group("Output");
}

// --plot: the picture goes to its own file, written whole or not at all.
void write_plot(const std::string& path, const std::string& svg) {
  std::ofstream file(path, std::ios::binary);
  if (!file || !(file << svg) || !file.flush()) {
    throw Error(fmt::format("--plot: cannot write \"{}\": {}", path, std::strerror(errno)));
  }
}

// The formats of the commands that print a report: each has its table, JSON and Markdown.
const std::initializer_list<std::string_view> kReportFormats = {"table", "json", "markdown"};

ReportOptions report_options(const OutputFlags& f,
                             std::initializer_list<std::string_view> formats) {
  ReportOptions r;
  r.explain = f.explain;
  try {
    r.unit = parse_unit(f.units);
  } catch (const Error& e) {
    rethrow_with_context(e, "--units");
  }
  if (std::find(formats.begin(), formats.end(), f.format) == formats.end()) {
    throw Error(fmt::format("--format: unknown format \"{}\" (expected one of: {})", f.format,
                            fmt::join(formats, ", ")));
  }
  return r;
}

// A plain-text report in Markdown: the table in a text block, every figure under its label.
std::string as_markdown(const OutputFlags& flags, std::string text) {
  return flags.format == "markdown" ? "```text\n" + text + "```\n" : std::move(text);
}

// A run config (--file) or a framework's config (--from) with the flags laid over it.
RunOptions with_file(const RunOptions& flag_options, const OutputFlags& flags) {
  RunOptions options;
  if (!flags.file.empty() && !flags.from.empty())
    throw Error("--from: not used with --file (give one file)");
  if (!flags.file.empty()) options = load_run_config(flags.file);
  if (!flags.from.empty()) {
    // A pointer and a count: the web page's libc++ has no span from two iterators.
    const std::span<const std::string> overrides(flags.from.data() + 1, flags.from.size() - 1);
    options = load_from_file(flags.from.front(), overrides, flag_options);
  }
  merge(options, flag_options);
  return options;
}

template <typename T, typename Parse>
std::vector<T> parse_list(const std::string& text, const char* flag, Parse parse) {
  std::vector<T> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      out.push_back(parse(item));
    } catch (const Error& e) {
      rethrow_with_context(e, flag);
    }
  }
  return out;
}

std::uint64_t parse_whole(std::string_view v) {
  std::uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || ptr != v.data() + v.size() || n == 0) {
    throw Error(fmt::format("expected a positive whole number, got \"{}\"", v));
  }
  return n;
}

struct FitFlags {
  std::string target = "batch";
  std::string max = "1048576";
  std::string gpus;  ///< fit --gpus N: search layouts instead
};

std::uint64_t parse_max(const FitFlags& ff) {
  try {
    return parse_whole(ff.max);
  } catch (const Error& e) {
    rethrow_with_context(e, "--max");
  }
}

// What the user fixed of the layout, which `fit --gpus` keeps.
LayoutConstraints fixed_layout(const RunOptions& given, const RunSpec& run) {
  LayoutConstraints c;
  if (given.tensor_parallel) c.tensor = run.parallel.tensor;
  if (given.pipeline_parallel) c.pipeline = run.parallel.pipeline;
  if (given.context_parallel) c.context = run.parallel.context;
  if (given.data_parallel) c.data_parallel = run.parallel.data_parallel;
  if (given.zero_stage) c.zero_stage = run.parallel.zero_stage;
  if (given.recompute) c.recompute = run.training.recompute;
  return c;
}

// A layout search's progress on stderr, for a person at a terminal: one line rewritten at most
// every 100 ms after the first 100 ms, cleared at the end; nothing when stderr is a pipe or a
// file.
LayoutProgress terminal_progress() {
  if (!isatty(STDERR_FILENO)) return {};
  using Clock = std::chrono::steady_clock;
  return [last = Clock::now(), shown = false](std::uint64_t done, std::uint64_t total) mutable {
    if (done == total) {
      if (shown) fmt::print(stderr, "\r\033[K");
      return;
    }
    if (Clock::now() - last < std::chrono::milliseconds(100)) return;
    last = Clock::now();
    shown = true;
    fmt::print(stderr, "\rmemest fit: {} of {} candidate layouts looked at", format_count(done),
               format_count(total));
  };
}

int run_fit_layouts(const RunSpec& run, const FitFlags& ff, FitTarget target,
                    const RunOptions& given, const OutputFlags& flags, std::ostream& out) {
  const auto report = report_options(flags, kReportFormats);
  std::uint64_t gpus = 0;
  try {
    gpus = parse_whole(ff.gpus);
  } catch (const Error& e) {
    rethrow_with_context(e, "--gpus");
  }
  if (gpus > 4096) throw Error(fmt::format("--gpus: {} is past the 4096 searched", gpus));
  const LayoutSearch search = fit_layouts(run, *run.budget, gpus, parse_max(ff), target,
                                          fixed_layout(given, run), terminal_progress());
  out << (flags.format == "json"
              ? render_layouts_json(run, *run.budget, search)
              : as_markdown(flags, render_layouts_table(run, *run.budget, search, report.unit)));
  return search.fits.empty() ? kExitCheckFailed : kExitOk;
}

// fit searches one size; the other is the user's, as a plain estimate needs both for the
// activations: none is assumed.
void require_other_size(const RunOptions& options, FitTarget target) {
  if (target == FitTarget::micro_batch && !options.seq) {
    throw Error(
        "--seq: fit needs the sequence length to search the micro-batch (a plain estimate needs "
        "--batch and --seq for activations); pass --seq N, or --for seq to search it");
  }
  if (target == FitTarget::seq_len && !options.batch) {
    throw Error(
        "--batch: fit --for seq needs the micro-batch to search the sequence length (a plain "
        "estimate needs --batch and --seq for activations); pass --batch N");
  }
}

int run_fit(const FitFlags& ff, const RunOptions& flag_options, const OutputFlags& flags,
            std::ostream& out) {
  const auto report = report_options(flags, kReportFormats);
  if (ff.target != "batch" && ff.target != "seq") {
    throw Error(
        fmt::format("--for: unknown target \"{}\" (expected one of: batch, seq)", ff.target));
  }
  const FitTarget target = ff.target == "batch" ? FitTarget::micro_batch : FitTarget::seq_len;
  const std::uint64_t limit = parse_max(ff);
  // The searched size starts at 1 unless given (from the flags or a run config); the other
  // size must be given.
  const RunOptions given = with_file(flag_options, flags);
  require_other_size(given, target);
  RunOptions options = given;
  TextSetting& searched = target == FitTarget::micro_batch ? options.batch : options.seq;
  if (!searched) searched = Setting<std::string>{"1", "fit"};
  const RunSpec run = resolve(options);
  if (!run.budget)
    throw Error("fit needs a budget: pass --gpu NAME (see 'memest gpus') or --budget SIZE");
  if (!ff.gpus.empty()) return run_fit_layouts(run, ff, target, given, flags, out);
  FitResult fit = fit_largest(run, *run.budget, target, limit);
  fit.warnings = unsupported_features(run, *run.budget);
  if (const TextSetting& value = target == FitTarget::micro_batch ? given.batch : given.seq) {
    fit.given = target == FitTarget::micro_batch ? run.training.micro_batch : run.training.seq_len;
    fit.given_where = value->where;
    fit.need_at_given = bytes_needed(run);
  }
  std::vector<Remedy> fixes;
  if (!fit.best) {
    RunSpec at_one = run;  // what would make even the smallest size fit
    (target == FitTarget::micro_batch ? at_one.training.micro_batch : at_one.training.seq_len) = 1;
    fixes = remedies(at_one, *run.budget);
  }
  out << (flags.format == "json" ? render_fit_json(run, *run.budget, target, fit, fixes)
                                 : as_markdown(flags, render_fit_table(run, *run.budget, target,
                                                                       fit, fixes, report.unit)));
  return fit.best ? kExitOk : kExitCheckFailed;
}

struct SweepFlags {
  std::string batches, seqs, policies, optimizers;
};

int run_sweep(const SweepFlags& sf, const RunOptions& options, const OutputFlags& flags,
              std::ostream& out) {
  const ReportOptions report = report_options(flags, {"table", "csv", "jsonl"});
  SweepGrid grid;
  grid.micro_batches = parse_list<std::uint64_t>(sf.batches, "--batches", parse_whole);
  grid.seq_lens = parse_list<std::uint64_t>(sf.seqs, "--seqs", parse_whole);
  // A swept size stands in for the flag, so --batches with --seq (no --batch) is a whole run.
  RunOptions with_lists = with_file(options, flags);
  if (!grid.micro_batches.empty() && !with_lists.batch)
    with_lists.batch =
        Setting<std::string>{std::to_string(grid.micro_batches.front()), "--batches"};
  if (!grid.seq_lens.empty() && !with_lists.seq)
    with_lists.seq = Setting<std::string>{std::to_string(grid.seq_lens.front()), "--seqs"};
  const RunSpec run = resolve(with_lists);
  grid.policies = parse_list<PrecisionPolicy>(sf.policies, "--policies", precision_preset);
  grid.optimizers = parse_list<OptimizerKind>(sf.optimizers, "--optimizers", parse_optimizer);
  if (grid.micro_batches.empty() && grid.seq_lens.empty() && grid.policies.empty() &&
      grid.optimizers.empty()) {
    throw Error("sweep needs a list to sweep: --batches, --seqs, --policies or --optimizers");
  }
  // A row is a whole run: without a micro-batch and a sequence it would have no peak.
  if ((grid.micro_batches.empty() && run.training.micro_batch == 0) ||
      (grid.seq_lens.empty() && run.training.seq_len == 0)) {
    throw Error(
        "sweep needs a micro-batch and a sequence length: --batches or --batch, and --seqs or "
        "--seq");
  }
  check_sweep(run, grid);  // a grid too large, or a point the layout refuses: nothing printed
  const bool jsonl = flags.format == "jsonl";
  std::vector<SweepRow> rows;  // kept only for --plot
  if (!jsonl) out << render_sweep_csv_header();
  sweep(run, grid, run.budget, [&](const SweepRow& row) {
    out << (jsonl ? render_sweep_jsonl_row(row) : render_sweep_csv_row(row));
    if (!flags.plot.empty()) rows.push_back(row);
  });
  if (!flags.plot.empty()) write_plot(flags.plot, render_sweep_svg(run, rows, report));
  return kExitOk;
}

int run_models(const std::string& filter, const OutputFlags& flags, std::ostream& out) {
  report_options(flags, kReportFormats);  // validates --format and --units
  const auto presets = model_presets(filter);
  if (presets.empty()) {
    throw Error(
        fmt::format("models: no preset matches \"{}\" (by name, Hub id or family; "
                    "'memest models' lists all)",
                    filter));
  }
  out << (flags.format == "json" ? render_models_json(presets)
                                 : as_markdown(flags, render_models_table(presets)));
  return kExitOk;
}

int run_gpus(const OutputFlags& flags, std::ostream& out) {
  const auto report = report_options(flags, kReportFormats);
  out << (flags.format == "json"
              ? render_gpus_json(gpu_presets())
              : as_markdown(flags, render_gpus_table(gpu_presets(), report.unit)));
  return kExitOk;
}

int run_check(const std::vector<std::string>& files, const RunOptions& overrides,
              const OutputFlags& flags, std::ostream& out) {
  const auto report = report_options(flags, kReportFormats);
  if (!flags.file.empty()) throw Error("--file: not used by check (pass the files as arguments)");
  if (!flags.from.empty()) throw Error("--from: not used by check (it checks run config files)");
  if (files.empty()) throw Error("check: give one or more run config files (JSON)");
  std::vector<CheckResult> results;
  results.reserve(files.size());
  for (const auto& f : files) results.push_back(check_run_file(f, overrides));
  out << (flags.format == "json" ? render_check_json(results)
                                 : as_markdown(flags, render_check_table(results, report.unit)));
  int code = kExitOk;
  for (const auto& r : results) {
    if (r.status == CheckStatus::invalid) return kExitInvalidInput;
    if (r.status == CheckStatus::over) code = kExitCheckFailed;
  }
  return code;
}

// The same run under each of `policies` (comma-separated precision presets).
int run_compare(const std::string& policies, const RunOptions& flag_options,
                const OutputFlags& flags, std::ostream& out) {
  const auto report = report_options(flags, kReportFormats);
  if (flag_options.precision || flag_options.amp) {
    throw Error("--precision: not used by compare (name the policies with --policies)");
  }
  // The listed policies replace a run config's own precision preset.
  RunOptions options = with_file(flag_options, flags);
  options.amp.reset();
  std::vector<RunSpec> runs;
  std::vector<Estimate> estimates;
  std::istringstream list(policies);
  for (std::string name; std::getline(list, name, ',');) {
    options.precision = Setting<std::string>{name, "--policies"};
    runs.push_back(resolve(options));
    estimates.push_back(estimate(runs.back()));
  }
  if (runs.empty()) throw Error("--policies: expected a comma-separated list of policies");
  out << (flags.format == "json"       ? render_compare_json(runs, estimates)
          : flags.format == "markdown" ? render_compare_markdown(runs, estimates, report.unit)
                                       : render_compare_table(runs, estimates, report.unit));
  // With a budget, exit 1 when no policy fits it, as an estimate over its budget does.
  const bool none_fits = std::all_of(estimates.begin(), estimates.end(),
                                     [](const Estimate& e) { return e.budget && !e.budget->fits; });
  return none_fits ? kExitCheckFailed : kExitOk;
}

int run_estimate(const RunOptions& flag_options, const OutputFlags& flags, std::ostream& out) {
  ReportOptions report = report_options(flags, kReportFormats);
  report.color = flags.color;
  const RunOptions options = with_file(flag_options, flags);
  const RunSpec spec = resolve(options);
  Estimate est = estimate(spec, {.timeline = !flags.plot.empty()});
  if (spec.budget) {  // what the run asks of the chosen GPU that it lacks
    for (auto& w : unsupported_features(spec, *spec.budget)) est.warnings.push_back(std::move(w));
  }
  if (!flags.plot.empty()) write_plot(flags.plot, render_step_svg(spec, est, report));
  if (flags.format == "json") {
    out << render_json(spec, est, report, run_config_of(options));
  } else if (flags.format == "markdown") {
    out << render_markdown(spec, est, report);
  } else {
    out << render_table(spec, est, report) << render_bar(est, spec.budget, report);
  }
  return est.budget && !est.budget->fits ? kExitCheckFailed : kExitOk;
}

// The common one-shot command without CLI11: a plain estimate whose arguments are each a run
// option or output option, given once as `--name value` (a value not starting with '-') or as
// `--flag`. Anything else (a subcommand, --help, `--name=value`, a repeat, an unknown name) is
// left to CLI11, so its answers and messages stay the only ones. CLI11 adds its ~60 options in
// O(n^2) name checks, most of a one-shot run's instructions (docs/performance.md); fuzz_cli and
// cli_test check that both paths print the same. Returns false to fall back.
bool parse_plain(int argc, const char* const* argv, RunOptions& options, OutputFlags& output) {
  std::vector<std::string_view> seen;
  for (int i = 1; i < argc; ++i) {
    const std::string_view name = argv[i];
    if (!name.starts_with("--") || std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return false;
    }
    seen.push_back(name);
    if (name == "--explain") {
      output.explain = true;
      continue;
    }
    // CLI11 takes a subcommand's name as the subcommand, never as a value.
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) return nullptr;
      const std::string_view v = argv[i + 1];
      const bool ok = !v.empty() && v[0] != '-' &&
                      std::find(kSubcommands.begin(), kSubcommands.end(), v) == kSubcommands.end();
      return ok ? argv[++i] : nullptr;
    };
    std::string* out_text = name == "--file"     ? &output.file
                            : name == "--units"  ? &output.units
                            : name == "--format" ? &output.format
                            : name == "--plot"   ? &output.plot
                                                 : nullptr;
    if (out_text) {
      const char* v = value();
      if (!v) return false;
      *out_text = v;
      continue;
    }
    const auto& table = run_option_table();
    const auto info = std::find_if(table.begin(), table.end(),
                                   [&](const RunOptionInfo& o) { return o.flag == name; });
    if (info == table.end()) return false;
    if (info->boolean) {
      options.*info->boolean = Setting<bool>{true, info->flag};
      continue;
    }
    const char* v = value();
    if (!v) return false;
    options.*info->text = Setting<std::string>{v, info->flag};
  }
  return true;
}

// An Error may carry several problems, one per line (a run config's); each gets the prefix.
void print_error(std::ostream& err, const Error& e) {
  std::istringstream lines(e.what());
  for (std::string line; std::getline(lines, line);) fmt::print(err, "memest: error: {}\n", line);
}

// Runs `command` with the exit codes of memest's errors.
template <typename F>
int guarded(std::ostream& err, F command) {
  try {
    return command();
  } catch (const Error& e) {
    print_error(err, e);
    return kExitInvalidInput;
  } catch (const std::exception& e) {
    fmt::print(err, "memest: internal error: {} (please report)\n", e.what());
    return kExitBug;
  }
}

// Colour only for a person at a terminal (https://no-color.org: NO_COLOR set disables it).
bool use_color(const std::ostream& out) {
  return &out == &std::cout && isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr;
}

// The subcommands and what each one's own options are read into.
struct Subcommands {
  CLI::App* models = nullptr;
  std::string models_filter;
  CLI::App* gpus = nullptr;
  CLI::App* check = nullptr;
  std::vector<std::string> check_files;
  CLI::App* compare = nullptr;
  std::string policies = "fp32,amp,mixed,bf16";
  CLI::App* fit = nullptr;
  FitFlags fit_flags;
  CLI::App* sweep = nullptr;
  SweepFlags sweep_flags;
  CLI::App* schema = nullptr;
  bool serve_schema = false;
  CLI::App* serve = nullptr;
};

// The commands that list presets or check and compare runs.
void add_listing_commands(CLI::App& app, Subcommands& c) {
  c.models = app.add_subcommand(
      "models", "List the model presets: Hub id, family, parameter count and layout");
  c.models
      ->add_option("filter", c.models_filter, "Only presets whose name, Hub id or family has it")
      ->type_name("TEXT");
  c.gpus = app.add_subcommand("gpus", "List the GPU presets with their memory");
  c.check = app.add_subcommand(
      "check",
      "Check run config files against their budgets: exit 0 all fit, 1 some over, 2 some invalid");
  // Not required by CLI11: `check --from F a.json` gives --from both values, and run_check says
  // what is wrong with that instead of "files is required".
  c.check->add_option("files", c.check_files, "Run config files (JSON), one or more")
      ->type_name("FILE");
  c.compare =
      app.add_subcommand("compare", "The same run under several precision policies, side by side");
  c.compare
      ->add_option("--policies", c.policies,
                   "Comma-separated policies (default fp32,amp,mixed,bf16)")
      ->type_name("LIST");
}

// The commands that search sizes or grids, and the schema.
void add_search_commands(CLI::App& app, Subcommands& c) {
  c.fit = app.add_subcommand(
      "fit",
      "The largest micro-batch (or sequence) that fits the budget; if none, what would help");
  c.fit->add_option("--for", c.fit_flags.target, "What to maximise: batch or seq (default batch)")
      ->type_name("TARGET");
  c.fit
      ->add_option("--gpus", c.fit_flags.gpus,
                   "Search the layouts of N GPUs (tp, pp, cp, dp with ZeRO, recompute) that fit, "
                   "most headroom first; memory only, speed is not modelled")
      ->type_name("N");
  c.fit->add_option("--max", c.fit_flags.max, "The largest value to try (default 1048576)")
      ->type_name("N");
  c.sweep = app.add_subcommand(
      "sweep", "Every combination of the lists given, as CSV (--format csv) or JSON lines (jsonl)");
  SweepFlags& sf = c.sweep_flags;
  c.sweep->add_option("--batches", sf.batches, "Micro-batch sizes, e.g. 1,2,4,8")
      ->type_name("LIST");
  c.sweep->add_option("--seqs", sf.seqs, "Sequence lengths, e.g. 1024,2048")->type_name("LIST");
  c.sweep->add_option("--policies", sf.policies, "Precision policies, e.g. fp32,bf16")
      ->type_name("LIST");
  c.sweep->add_option("--optimizers", sf.optimizers, "Optimizers, e.g. adamw,adam8bit")
      ->type_name("LIST");
  c.schema = app.add_subcommand("schema", "Print the JSON Schema of run config files");
  c.schema->add_flag("--serve", c.serve_schema,
                     "The JSON Schema of serve run configs instead (memest serve --file)");
  // Parsed by serve_command when it comes first (memest serve --help lists its flags).
  c.serve = app.add_subcommand(
      "serve", "Serving memory of vLLM, SGLang or llama.cpp: weights, KV cache, profile peak");
  c.serve->prefix_command();
}

void add_subcommands(CLI::App& app, Subcommands& c) {
  add_listing_commands(app, c);
  add_search_commands(app, c);
  for (auto* sub : {c.models, c.gpus, c.check, c.compare, c.fit, c.sweep, c.schema}) {
    sub->fallthrough();  // the run and output options of memest apply here too
    sub->footer(
        "\nThe run options of 'memest --help' (--model, --batch, --seq, --gpu, --format, ...)\n"
        "apply to this command too, before or after its name.");
  }
}

// Runs the subcommand given, or a plain estimate.
int dispatch(const Subcommands& c, const RunOptions& options, const OutputFlags& output,
             std::ostream& out) {
  for (const auto* sub : {c.models, c.gpus, c.check, c.compare, c.fit, c.schema}) {
    if (sub->parsed() && !output.plot.empty())
      throw Error(fmt::format("--plot: not used by {} (an estimate or a sweep draws one)",
                              sub->get_name()));
  }
  if (c.serve->parsed()) {
    throw Error(
        "serve: give it first, with its own flags after it (memest serve --model NAME ...)");
  }
  if (c.models->parsed()) return run_models(c.models_filter, output, out);
  if (c.gpus->parsed()) return run_gpus(output, out);
  if (c.check->parsed()) return run_check(c.check_files, options, output, out);
  if (c.compare->parsed()) return run_compare(c.policies, options, output, out);
  if (c.fit->parsed()) return run_fit(c.fit_flags, options, output, out);
  if (c.schema->parsed()) {
    out << (c.serve_schema ? serve_config_schema() : run_config_schema());
    return kExitOk;
  }
  if (c.sweep->parsed()) return run_sweep(c.sweep_flags, options, output, out);
  return run_estimate(options, output, out);
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  return run(argc, argv, out, err, Parser::plain_first);
}

int run(std::span<const std::string> words, std::ostream& out, std::ostream& err) {
  std::vector<const char*> argv;
  argv.reserve(words.size());
  for (const auto& w : words) argv.push_back(w.c_str());
  return run(static_cast<int>(argv.size()), argv.data(), out, err);
}

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err, Parser parser) {
  // `fit --serve` is refused with a pointer to serving's own fit, before the training flags
  // (which have no --serve) are parsed; fit's help stays as it was.
  if (argc > 1 && std::string_view(argv[1]) == "fit" &&
      std::any_of(argv + 2, argv + argc,
                  [](const char* a) { return std::string_view(a) == "--serve"; })) {
    return guarded(err, []() -> int {
      throw Error(
          "fit --serve: serving is memest serve --fit context|concurrency (memest serve "
          "--help)");
    });
  }
  if (argc > 1 && std::string_view(argv[1]) == "serve") {
    const std::vector<std::string> args(argv + 2, argv + argc);
    return guarded(err, [&] {
      const ServeOutput served = serve_command(args);
      if (!served.plot_path.empty()) write_plot(served.plot_path, served.plot);
      out << served.text;
      return served.exit_code == 0 ? kExitOk : kExitCheckFailed;
    });
  }
  if (RunOptions plain; parser == Parser::plain_first) {
    if (OutputFlags flags; parse_plain(argc, argv, plain, flags)) {
      flags.color = use_color(out);
      return guarded(err, [&] { return run_estimate(plain, flags, out); });
    }
  }
  CLI::App app{"memest: how much accelerator memory a training run needs, and why", "memest"};
  app.footer(kExamples);
  app.set_version_flag("--version", fmt::format("memest {}", version()));
  RunOptions options;
  OutputFlags output;
  Binder binder;
  binder.bind(app, options);
  add_output_flags(app, output);
  app.require_subcommand(0, 1);
  Subcommands commands;
  add_subcommands(app, commands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::ConversionError& e) {  // a flag given a value: --compile=maybe
    fmt::print(err, "memest: error: {} (expected true or false, or no value)\n", e.what());
    return kExitInvalidInput;
  } catch (const CLI::ParseError& e) {
    fmt::print(err, "memest: error: {} (see memest --help)\n", e.what());
    return kExitInvalidInput;
  }
  output.color = use_color(out);
  return guarded(err, [&] {
    binder.collect();
    return dispatch(commands, options, output, out);
  });
}

}  // namespace memest::cli
