#include "cli/cli.hpp"

#include <memest/config.hpp>
#include <memest/error.hpp>
#include <memest/report.hpp>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <deque>
#include <functional>
#include <string>

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

// Binds flags to RunOptions: each flag writes into stable storage, and after parsing the ones
// that were given become Settings that remember the flag's name for error messages.
class Binder {
 public:
  explicit Binder(CLI::App& app) : app_(app) {}

  /// Flags added from now on are listed under this heading in --help.
  void group(std::string name) { group_ = std::move(name); }

  void text(const std::string& flag, std::optional<Setting<std::string>>& target,
            const std::string& help, const std::string& type = "TEXT") {
    auto& storage = texts_.emplace_back();
    auto* opt = app_.add_option(flag, storage, help)->type_name(type)->group(group_);
    collect_.push_back([opt, &storage, &target, flag] {
      if (opt->count() > 0) target = Setting<std::string>{storage, flag};
    });
  }

  void boolean(const std::string& flag, std::optional<Setting<bool>>& target,
               const std::string& help) {
    auto* opt = app_.add_flag(flag, help)->group(group_);
    collect_.push_back([opt, &target, flag] {
      if (opt->count() > 0) target = Setting<bool>{true, flag};
    });
  }

  void collect() {
    for (auto& c : collect_) c();
  }

 private:
  CLI::App& app_;
  std::string group_ = "Options";
  std::deque<std::string> texts_;
  std::vector<std::function<void()>> collect_;
};

std::string joined(std::span<const std::string_view> names) {
  return fmt::format("{}", fmt::join(names, ", "));
}

void add_run_flags(Binder& b, RunOptions& o) {
  b.group("Model (one of)");
  b.text("--params", o.params, "Parameter count: 7B, 6.7B, 125M, 1.3e9, 6738415616", "COUNT");
  b.text("--model", o.model, "A model preset (see 'memest models')", "NAME");
  b.text("--config", o.config, "A Hugging Face config.json", "PATH");
  b.group("Optimizer");
  b.text("--optimizer", o.optimizer, "Optimizer: " + joined(optimizer_names()) + " (default adamw)",
         "NAME");
  b.boolean("--nesterov", o.nesterov, "sgd-momentum: Nesterov momentum (same state)");
  b.boolean("--amsgrad", o.amsgrad, "adam/adamw: keep max_exp_avg_sq");
  b.boolean("--rmsprop-momentum", o.rmsprop_momentum, "rmsprop: keep a momentum buffer");
  b.boolean("--centered", o.centered, "rmsprop: keep grad_avg (centered)");
  b.boolean("--first-moment", o.first_moment, "adafactor: keep exp_avg (beta1 set)");
  b.boolean("--fused-optimizer", o.fused_optimizer,
            "fused/capturable optimizer: step counters in device memory");
  b.group("Precision");
  b.text("--precision", o.precision, "Precision policy: " + joined(precision_names()) +
         " (default fp32)", "NAME");
  b.boolean("--amp", o.amp, "Short for --precision amp (torch.autocast fp16)");
  const std::string dtypes = joined(dtype_names());
  b.text("--param-dtype", o.param_dtype, "Dtype of stored parameters: " + dtypes, "DTYPE");
  b.text("--grad-dtype", o.grad_dtype, "Dtype of gradients", "DTYPE");
  b.text("--master-dtype", o.master_dtype, "Dtype of master weights, or none", "DTYPE");
  b.text("--state-dtype", o.state_dtype, "Dtype of optimizer states", "DTYPE");
  b.text("--activation-dtype", o.activation_dtype, "Dtype of activations", "DTYPE");
  b.text("--working-dtype", o.working_dtype, "Dtype of autocast weight copies, or none", "DTYPE");
  b.text("--grad-accum-dtype", o.grad_accum_dtype,
         "Dtype of a separate gradient accumulation buffer, or none", "DTYPE");
  b.group("Training");
  b.text("--batch", o.batch, "Micro-batch size (sequences per forward pass)", "N");
  b.text("--seq", o.seq, "Sequence length in tokens", "N");
  b.text("--grad-accum", o.grad_accum, "Micro-batches per optimizer step (default 1)", "N");
  b.text("--attention", o.attention, "Attention: " + joined(attention_names()), "NAME");
  b.text("--recompute", o.recompute, "Activation recompute: " + joined(recompute_names()), "NAME");
  b.text("--dropout", o.dropout, "Override every dropout probability", "P");
}

struct OutputFlags {
  std::string units = "GB";
  std::string format = "table";
};

void add_output_flags(CLI::App& app, OutputFlags& f) {
  app.add_option("--units", f.units, "Units of the table: " + joined(unit_names()) + " (default GB)")
      ->type_name("UNIT")
      ->group("Output");
  app.add_option("--format", f.format, "Output format: table, json (default table)")
      ->type_name("FORMAT")
      ->group("Output");
}

ReportOptions report_options(const OutputFlags& f) {
  ReportOptions r;
  try {
    r.unit = parse_unit(f.units);
  } catch (const Error& e) {
    rethrow_with_context(e, "--units");
  }
  if (f.format != "table" && f.format != "json") {
    throw Error(fmt::format("--format: unknown format \"{}\" (expected one of: table, json)",
                            f.format));
  }
  return r;
}

int run_estimate(const RunOptions& options, const OutputFlags& flags, std::ostream& out) {
  const ReportOptions report = report_options(flags);
  const RunSpec spec = resolve(options);
  const Estimate est = estimate(spec);
  if (flags.format == "json") {
    out << render_json(spec, est, report);
  } else {
    out << render_table(spec, est, report);
  }
  return kExitOk;
}

}  // namespace

int run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"memest: how much accelerator memory a training run needs, and why", "memest"};
  app.footer(kExamples);
  app.set_version_flag("--version", fmt::format("memest {}", version()));
  RunOptions options;
  OutputFlags output;
  Binder binder(app);
  add_run_flags(binder, options);
  add_output_flags(app, output);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForVersion& e) {
    out << e.what() << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    fmt::print(err, "memest: error: {} (see memest --help)\n", e.what());
    return kExitInvalidInput;
  }
  try {
    binder.collect();
    return run_estimate(options, output, out);
  } catch (const Error& e) {
    fmt::print(err, "memest: error: {}\n", e.what());
    return kExitInvalidInput;
  } catch (const std::exception& e) {
    fmt::print(err, "memest: internal error: {} (please report)\n", e.what());
    return kExitBug;
  }
}

}  // namespace memest::cli
