// The Python module `memest`: the command line run in-process (memest::cli::run), so every
// answer, default and error message is the CLI's. Keyword arguments are generated from the run
// option table (src/input/run_options.cpp), each the option's flag without its dashes
// ("--lora-rank": lora_rank); results are the CLI's JSON as Python objects, in the CLI's key order.
#include "cli/cli.hpp"

#include <memest/report.hpp>
#include <memest/run_config.hpp>
#include <memest/run_options.hpp>
#include <memest/serve_config.hpp>
#include <memest/serve_options.hpp>
#include <memest/suggest.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <pybind11/pybind11.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using Json = nlohmann::ordered_json;

/// An input the CLI refuses (its exit code 2): raised as memest.Error, a ValueError.
struct InvalidInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A keyword of one command beyond the run options: fit's target, sweep's lists.
struct Extra {
  const char* keyword;
  const char* flag;
  const char* help;
};

// The output options every command takes.
const std::vector<Extra> kOutputExtras = {
    {"file", "--file", "A run config (a path); the other keywords override its settings"},
    {"from_file", "--from",
     "A training framework's config file (a path), or a list: the path, then its KEY=VALUE "
     "overrides (docs/from.md); the other keywords override it"},
};
const std::vector<Extra> kEstimateExtras = {
    {"plot", "--plot", "Also write live memory over the step as an SVG picture to this path"},
};
const std::vector<Extra> kFitExtras = {
    {"target", "--for", "What to maximise: batch or seq (default batch; the CLI's --for)"},
    {"gpus", "--gpus", "Search the layouts of N GPUs that fit (memory only)"},
    {"max", "--max", "The largest value to try (default 1048576)"},
};
const std::vector<Extra> kCompareExtras = {
    {"policies", "--policies",
     "Precision policies, a list or comma-separated (default fp32,amp,"
     "mixed,bf16)"},
};
const std::vector<Extra> kSweepExtras = {
    {"batches", "--batches", "Micro-batch sizes, a list or comma-separated"},
    {"seqs", "--seqs", "Sequence lengths, a list or comma-separated"},
    {"policies", "--policies", "Precision policies, a list or comma-separated"},
    {"optimizers", "--optimizers", "Optimizers, a list or comma-separated"},
    {"plot", "--plot", "Also write need against batch or sequence as an SVG picture to this path"},
};

/// The keyword of a run option: its flag without the dashes, '-' as '_'.
std::string keyword_of(std::string_view flag) {
  std::string k(flag.substr(2));
  for (char& c : k) {
    if (c == '-') c = '_';
  }
  return k;
}

/// A value as the CLI would get it: str, int, float or a path.
std::string text_of(const std::string& keyword, py::handle v) {
  if (py::isinstance<py::bool_>(v)) {
    throw py::type_error(fmt::format("{}: expected a str, int or float, got bool", keyword));
  }
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) return py::str(v);
  if (py::hasattr(v, "__fspath__")) return py::str(v.attr("__fspath__")());
  throw py::type_error(fmt::format("{}: expected a str, int or float, got {}", keyword,
                                   py::str(py::type::of(v).attr("__name__")).cast<std::string>()));
}

/// A list for --batches and the like: a str as it is, else the items joined by commas.
std::string list_of(const std::string& keyword, py::handle v) {
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) return text_of(keyword, v);
  std::string out;
  for (const py::handle item : v) {
    if (!out.empty()) out += ',';
    out += text_of(keyword, item);
  }
  return out;
}

/// from_file=: a path, or a list of the path and its overrides, each an argument of --from.
std::vector<std::string> from_values(const std::string& keyword, py::handle v) {
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) return {text_of(keyword, v)};
  std::vector<std::string> out;
  for (const py::handle item : v) out.push_back(text_of(keyword, item));
  return out;
}

/// The arguments of one CLI run.
class Args {
 public:
  explicit Args(std::vector<std::string> command) : argv_(std::move(command)) {
    argv_.insert(argv_.begin(), "memest");
  }
  // `--name value` where the CLI's short path takes it; `--name=value` for a value it would
  // read as a flag (a leading '-') or an empty one.
  void option(const std::string& flag, const std::string& value) {
    if (value.empty() || value[0] == '-') {
      argv_.push_back(flag + "=" + value);
    } else {
      argv_.push_back(flag);
      argv_.push_back(value);
    }
  }
  void flag(const std::string& flag) { argv_.push_back(flag); }
  // --from FILE KEY=VALUE ...: one flag, several values.
  void values(const std::string& flag, const std::vector<std::string>& values) {
    argv_.push_back(flag);
    argv_.insert(argv_.end(), values.begin(), values.end());
  }
  const std::vector<std::string>& argv() const { return argv_; }

 private:
  std::vector<std::string> argv_;
};

/// A keyword no command takes: a TypeError with the closest name, as Python's own is.
[[noreturn]] void unknown_keyword(const std::string& command, const std::string& key,
                                  const std::vector<Extra>& extras) {
  std::vector<std::string> names;
  for (const auto& info : memest::run_option_table()) names.push_back(keyword_of(info.flag));
  for (const Extra& e : extras) names.emplace_back(e.keyword);
  const std::vector<std::string_view> views(names.begin(), names.end());
  throw py::type_error(fmt::format("{}() got an unexpected keyword argument '{}'{}", command, key,
                                   memest::did_you_mean(key, views)));
}

// A boolean keyword: True passes the flag, False or None leaves it out.
void add_flag(Args& args, const std::string& key, const std::string& flag, py::handle v) {
  if (v.is_none()) return;
  if (!py::isinstance<py::bool_>(v)) {
    throw py::type_error(
        fmt::format("{}: expected a bool, got {}", key,
                    py::str(py::type::of(v).attr("__name__")).cast<std::string>()));
  }
  if (v.cast<bool>()) args.flag(flag);
}

// config= and architecture= take a dict (transformers' model.config.to_dict()) as JSON text.
bool add_model_dict(Args& args, const std::string& key, py::handle v) {
  if ((key != "config" && key != "architecture") || !py::isinstance<py::dict>(v)) return false;
  const auto dumps = py::module_::import("json").attr("dumps");
  args.option("--architecture", dumps(v).cast<std::string>());
  return true;
}

/// The CLI's arguments for `command` in `format` with these keywords (the format first, so that
/// an empty last value is refused as the CLI refuses it alone).
Args arguments(const std::string& command, const std::string& format, const py::kwargs& kwargs,
               const std::vector<Extra>& extras) {
  Args args(command == "estimate" ? std::vector<std::string>{} : std::vector<std::string>{command});
  args.option("--format", format);
  std::vector<Extra> all = kOutputExtras;
  all.insert(all.end(), extras.begin(), extras.end());
  for (const auto& [k, v] : kwargs) {
    const auto key = k.cast<std::string>();
    if (v.is_none() || add_model_dict(args, key, v)) continue;
    const auto& table = memest::run_option_table();
    const auto info = std::find_if(table.begin(), table.end(),
                                   [&](const auto& o) { return keyword_of(o.flag) == key; });
    if (info != table.end()) {
      if (info->boolean) {
        add_flag(args, key, info->flag, v);
      } else {
        args.option(info->flag, text_of(key, v));
      }
      continue;
    }
    const auto extra =
        std::find_if(all.begin(), all.end(), [&](const Extra& e) { return e.keyword == key; });
    if (extra == all.end()) unknown_keyword(command, key, all);
    if (key == "from_file") {
      args.values(extra->flag, from_values(key, v));
      continue;
    }
    args.option(extra->flag, list_of(key, v));
  }
  return args;
}

/// Runs the CLI; its exit code 2 becomes memest.Error with the message it printed (without the
/// "memest: error: " prefix), 3 a RuntimeError. 0 and 1 (a check failed) return the output.
std::string run_cli(const Args& args) {
  std::ostringstream out, err;
  int code = 0;
  {
    py::gil_scoped_release unlocked;
    code = memest::cli::run(args.argv(), out, err);
  }
  if (code == memest::cli::kExitOk || code == memest::cli::kExitCheckFailed) return out.str();
  std::string message = err.str();
  if (code == memest::cli::kExitInvalidInput) {
    constexpr std::string_view prefix = "memest: error: ";
    std::string lines;
    std::istringstream in(message);
    for (std::string line; std::getline(in, line);) {
      if (!lines.empty()) lines += '\n';
      lines += line.starts_with(prefix) ? line.substr(prefix.size()) : line;
    }
    throw InvalidInput(lines);
  }
  throw std::runtime_error(message);
}

py::object to_python(const Json& j) {
  switch (j.type()) {
    case Json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case Json::value_t::number_integer:
      return py::int_(j.get<std::int64_t>());
    case Json::value_t::number_unsigned:
      return py::int_(j.get<std::uint64_t>());
    case Json::value_t::number_float:
      return py::float_(j.get<double>());
    case Json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case Json::value_t::array: {
      py::list list;
      for (const auto& item : j) list.append(to_python(item));
      return list;
    }
    case Json::value_t::object: {
      py::dict dict;
      for (const auto& [key, value] : j.items()) dict[py::str(key)] = to_python(value);
      return dict;
    }
    default:
      return py::none();
  }
}

py::object json_result(const std::string& command, const py::kwargs& kwargs,
                       const std::vector<Extra>& extras) {
  const Args args = arguments(command, "json", kwargs, extras);
  return to_python(Json::parse(run_cli(args)));
}

/// sweep's rows, one JSON line each, made into dicts as they are taken.
class Rows {
 public:
  explicit Rows(std::string text) : text_(std::move(text)) {}
  py::object next() {
    if (pos_ >= text_.size()) throw py::stop_iteration();
    auto end = text_.find('\n', pos_);
    if (end == std::string::npos) end = text_.size();
    const auto line = std::string_view(text_).substr(pos_, end - pos_);
    pos_ = end + 1;
    return to_python(Json::parse(line));
  }

 private:
  std::string text_;
  std::size_t pos_ = 0;
};

// The serve options that are keywords of serve(): all but the output's form (always JSON) and
// --help.
bool serve_keyword(const memest::ServeOptionInfo& f) {
  return f.flag != "--format" && f.flag != "--units" && f.flag != "--help" && f.flag != "-h";
}

/// The CLI's arguments of `memest serve --format json` with these keywords, each a serve flag
/// without its dashes ('-' as '_'): a bool for a switch, else a str, int, float or path.
Args serve_arguments(const py::kwargs& kwargs) {
  Args args({"serve"});
  args.option("--format", "json");
  for (const auto& [k, v] : kwargs) {
    const auto key = k.cast<std::string>();
    if (v.is_none()) continue;
    const auto& table = memest::serve_option_table();
    const auto f = std::find_if(table.begin(), table.end(), [&](const auto& o) {
      return serve_keyword(o) && memest::serve_config_key(o.flag) == key;
    });
    if (f == table.end()) {
      std::vector<std::string> names;
      for (const auto& o : table) {
        if (serve_keyword(o)) names.push_back(memest::serve_config_key(o.flag));
      }
      const std::vector<std::string_view> views(names.begin(), names.end());
      throw py::type_error(fmt::format("serve() got an unexpected keyword argument '{}'{}", key,
                                       memest::did_you_mean(key, views)));
    }
    if (f->kind == memest::ValueKind::flag) {
      add_flag(args, key, f->flag, v);
    } else {
      args.option(f->flag, text_of(key, v));
    }
  }
  return args;
}

py::list names_list(std::span<const std::string_view> names) {
  py::list out;
  for (const auto name : names) out.append(std::string(name));
  return out;
}

// serve_options(): the serve option table as the keywords of serve() see it.
py::list serve_options() {
  py::list out;
  for (const auto& f : memest::serve_option_table()) {
    if (!serve_keyword(f)) continue;
    py::dict d;
    d["keyword"] = memest::serve_config_key(f.flag);
    d["flag"] = f.flag;
    py::list engines;
    for (std::size_t i = 0; i < memest::serve_engine_names().size(); ++i) {
      const auto e = static_cast<memest::ServeEngine>(i);
      if (memest::serve_option_applies(f, e)) engines.append(memest::serve_engine_name(e));
    }
    d["engine"] = f.engine == memest::ServeFor::all ? py::object(py::str("all"))
                  : engines.size() == 1             ? py::object(engines[0])
                                                    : py::object(engines);
    d["config_key"] = f.config_key;
    d["type"] = f.kind == memest::ValueKind::flag ? std::string("bool") : f.type_name;
    d["kind"] = std::string(memest::value_kind_name(f.kind));
    d["choices"] = names_list(memest::serve_choices(f, memest::ServeEngine::vllm));
    d["llama_cpp_choices"] = names_list(memest::serve_choices(f, memest::ServeEngine::llama_cpp));
    d["sglang_choices"] = names_list(memest::serve_choices(f, memest::ServeEngine::sglang));
    d["hf_choices"] = names_list(memest::serve_choices(f, memest::ServeEngine::hf));
    d["default"] =
        f.fallback.value.empty() ? py::none() : py::object(py::str(std::string(f.fallback.value)));
    d["alias_of"] = f.alias_of.empty() ? py::none() : py::object(py::str(std::string(f.alias_of)));
    d["help"] = f.help;
    out.append(d);
  }
  return out;
}

// serve()'s docstring: its keywords with the serve table's help, each one's engine.
std::string serve_doc() {
  std::string doc =
      "serve(**options) -> dict\n\n"
      "The memory an inference engine allocates per device, as `memest serve --format json`\n"
      "prints it (weights, kv_cache, activations, non_torch, cuda_graphs, max_concurrency;\n"
      "with fit='context' or 'concurrency', the largest value that fits per weight format and\n"
      "KV-cache type). Keywords (each a flag of `memest serve --help` without its dashes, '-'\n"
      "as '_'; file= a serve run config the other keywords override):\n\n";
  for (const auto& f : memest::serve_option_table()) {
    if (!serve_keyword(f)) continue;
    const std::string type = f.kind == memest::ValueKind::flag ? "bool" : f.type_name;
    doc += fmt::format("    {} ({}): {}{}\n", memest::serve_config_key(f.flag), type,
                       memest::serve_engines_prefix(f), f.help);
  }
  return doc + "\n  None leaves a keyword out; False leaves a flag off.\n";
}

// help(): the keywords with the option table's help and each one's run-config key.
std::string options_doc(const std::vector<Extra>& extras) {
  std::string doc = "\nKeywords (each a flag of `memest --help` without its dashes, '-' as '_'):\n";
  std::string section;
  for (const auto& info : memest::run_option_table()) {
    if (info.section != section) {
      section = info.section;
      doc += fmt::format("\n  {}:\n", section);
    }
    const std::string type = info.boolean ? "bool" : info.type_name;
    doc += fmt::format("    {} ({}): {} [run config: {}.{}]\n", keyword_of(info.flag), type,
                       info.help, info.section, info.key);
  }
  std::vector<Extra> all = kOutputExtras;
  all.insert(all.end(), extras.begin(), extras.end());
  doc += "\n  output:\n";
  for (const Extra& e : all) {
    doc += fmt::format("    {}: {}\n", e.keyword, e.help);
  }
  doc +=
      "\n  config and architecture also take a dict (model.config.to_dict() in transformers).\n"
      "  None leaves a keyword out; False leaves a flag off.\n";
  return doc;
}

py::list options() {
  py::list out;
  for (const auto& info : memest::run_option_table()) {
    py::dict d;
    d["keyword"] = keyword_of(info.flag);
    d["flag"] = info.flag;
    d["section"] = info.section;
    d["key"] = info.key;
    d["type"] = info.boolean ? std::string("bool") : info.type_name;
    d["kind"] = std::string(memest::value_kind_name(info.kind));
    py::list choices;
    if (info.choices) {
      for (const auto name : info.choices()) choices.append(std::string(name));
    }
    d["choices"] = choices;
    d["default"] = info.fallback.value.empty()
                       ? py::none()
                       : py::object(py::str(std::string(info.fallback.value)));
    d["alias_of"] =
        info.alias_of.empty() ? py::none() : py::object(py::str(std::string(info.alias_of)));
    d["help"] = info.help;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(memest, m) {
  py::options settings;
  settings.disable_function_signatures();  // each docstring starts with its own signature
  m.doc() =
      "memest: how much accelerator memory a training run needs, and why.\n\n"
      "The memest command line, in-process: estimate, fit, compare and sweep take the run\n"
      "options as keywords and return what `memest ... --format json` prints, as Python\n"
      "objects with integer bytes. Invalid input raises memest.Error (a ValueError) with the\n"
      "CLI's message.";
  m.attr("__version__") = std::string(memest::version());
  py::register_exception<InvalidInput>(m, "Error", PyExc_ValueError);

  m.def(
      "estimate", [](const py::kwargs& kw) { return json_result("estimate", kw, kEstimateExtras); },
      ("estimate(**options) -> dict\n\n"
       "One training run: what `memest --format json` prints (categories with integer bytes,\n"
       "the peak over a step with its phase and live tensors; `inputs`, the run config that\n"
       "reproduces the run, which estimate(file=...) takes back; `run`, the run as resolved).\n" +
       options_doc(kEstimateExtras))
          .c_str());
  m.def(
      "fit", [](const py::kwargs& kw) { return json_result("fit", kw, kFitExtras); },
      ("fit(**options) -> dict\n\n"
       "The largest micro-batch (or sequence) that fits the budget (gpu= or budget=), as\n"
       "`memest fit --format json` prints it; when nothing fits, what would help.\n" +
       options_doc(kFitExtras))
          .c_str());
  m.def(
      "compare", [](const py::kwargs& kw) { return json_result("compare", kw, kCompareExtras); },
      ("compare(**options) -> dict\n\n"
       "The same run under several precision policies, as `memest compare --format json`.\n" +
       options_doc(kCompareExtras))
          .c_str());
  py::class_<Rows>(m, "SweepRows", "The rows of a sweep, each a dict, as they are taken")
      .def("__iter__", [](Rows& r) -> Rows& { return r; })
      .def("__next__", &Rows::next);
  m.def(
      "sweep",
      [](const py::kwargs& kw) {
        const Args args = arguments("sweep", "jsonl", kw, kSweepExtras);
        return Rows(run_cli(args));
      },
      ("sweep(**options) -> iterator of dict\n\n"
       "Every combination of the lists given, one row each, as `memest sweep --format jsonl`\n"
       "prints them. The rows are computed when sweep() is called (at most 1,000,000) and made\n"
       "into dicts one at a time.\n" +
       options_doc(kSweepExtras))
          .c_str());
  m.def(
      "serve",
      [](const py::kwargs& kw) { return to_python(Json::parse(run_cli(serve_arguments(kw)))); },
      serve_doc().c_str());
  m.def(
      "schema",
      [](bool serve) {
        return to_python(
            Json::parse(serve ? memest::serve_config_schema() : memest::run_config_schema()));
      },
      py::arg("serve") = false,
      "schema(serve=False) -> dict\n\nThe JSON Schema of run config files, as `memest schema` "
      "prints it;\nwith serve=True, of serve run configs (`memest schema --serve`).");
  m.def("serve_options", &serve_options,
        "serve_options() -> list of dict\n\n"
        "The keywords of serve(): keyword, flag, engine (vllm, llama.cpp, sglang, hf, a list of\n"
        "them, or all), config_key (whether a serve run config has it), type, kind, choices\n"
        "(vLLM's names, or every engine's), llama_cpp_choices, sglang_choices, hf_choices,\n"
        "default (None when none is constant), alias_of and help.");
  m.def("options", &options,
        "options() -> list of dict\n\n"
        "The run options: keyword, flag, run-config section and key, type, kind (flag, count,\n"
        "choice, ...), choices (the names it takes), default (None when none is constant),\n"
        "alias_of (the option it is another spelling of) and help.");
}
