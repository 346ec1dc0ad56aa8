// The renderers read an Estimate and format it; they compute nothing. These tests hand-build an
// Estimate whose numbers no model produces, so a renderer that recomputed anything would show.
#include "testutil.hpp"

#include <memest/check.hpp>
#include <memest/report.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

using namespace memest;

namespace {

// `key` and `label` are string literals: a row views them (Category::key).
Category row(std::string_view key, std::string_view label, std::optional<std::uint64_t> bytes,
             std::uint64_t elements = 1000, std::optional<Dtype> dtype = Dtype::bf16) {
  Category c;
  c.key = key;
  c.label = label;
  c.dtype = dtype;
  c.elements = elements;
  c.bytes = bytes;
  c.basis = "basis of " + std::string(c.label);
  return c;
}

// 1,000 parameters with rows of every kind: a device row, an unused one, one not estimated, a
// host row and a unified one. The total is deliberately not the sum of the rows.
Estimate hand_built() {
  Estimate e;
  e.params = 1000;
  e.trainable = 400;
  e.active = 1000;
  e.categories = {row("params", "parameters", 2000),
                  row("master_weights", "master weights", 0, 0, std::nullopt),
                  row("activations", "activations", std::nullopt, 0, std::nullopt),
                  row("optimizer_step", "optimizer step counters", 16, 4, Dtype::fp32),
                  row("optimizer_states", "optimizer states", 3200, 400, Dtype::fp32)};
  e.categories[3].on_device = false;
  e.categories[3].per_param = false;
  e.categories[4].on_device = false;
  e.categories[4].unified = true;
  e.total_bytes = 123'456'789;
  e.host_bytes = 16;
  e.unified_bytes = 3200;
  e.assumptions = {"an assumption"};
  e.notes = {"a note"};
  e.warnings = {"a warning"};
  return e;
}

RunSpec hand_run() {
  RunSpec run;
  run.model = model_from_count(1000);
  run.precision = precision_preset("bf16");
  return run;
}

}  // namespace

TEST_CASE("report: the table prints each row as the estimate states it", "[report]") {
  const std::string t = render_table(hand_run(), hand_built(), ReportOptions{});
  // The totals are the estimate's own, not sums of the rows.
  CHECK_THAT(t, Catch::Contains("device total (sum, without activations)"));
  CHECK_THAT(t, Catch::Contains("0.12 GB"));
  CHECK_THAT(t, Catch::Contains("not estimated  basis of activations"));
  // bytes per element is bytes / elements: 2000 / 1000.
  CHECK_THAT(t, Catch::Contains("parameters                 bf16         2.00"));
  // Unused rows print a dash; host and unified rows say where they are.
  CHECK_THAT(t, Catch::Contains("master weights             -               -                -"));
  CHECK_THAT(t, Catch::Contains("(unified)"));
  CHECK_THAT(t, Catch::Contains("unified memory (paged, not in the peak)"));
  // The step counters' elements are tensors, not parameters: no bytes per parameter.
  CHECK_THAT(t, Catch::Contains("optimizer step counters    fp32            -"));
  CHECK_THAT(t, Catch::Contains("assumed: an assumption\nnote: a note\nwarning: a warning\n"));
}

TEST_CASE("report: the JSON document carries exact bytes and null for what is not estimated",
          "[report]") {
  const std::string config = R"({"model": {"params": 1000}, "precision": "bf16"})";
  const auto j =
      nlohmann::json::parse(render_json(hand_run(), hand_built(), ReportOptions{}, config));
  CHECK(j["inputs"] == nlohmann::json::parse(config));  // the run config, as given
  CHECK(j["schema_version"] == kJsonSchemaVersion);
  CHECK(j["total"]["bytes"] == 123'456'789);
  CHECK(j["total"]["complete"] == false);
  CHECK(j["total"]["unified_bytes"] == 3200);
  CHECK(j["categories"]["activations"]["bytes"].is_null());
  CHECK(j["categories"]["master_weights"]["dtype"].is_null());
  CHECK(j["categories"]["optimizer_step"]["location"] == "host");
  CHECK(j["categories"]["optimizer_states"]["location"] == "unified");
  CHECK(j["categories"]["params"]["bytes_per_element"] == 2.0);
  CHECK(j["parameters"]["trainable"] == 400);
  CHECK(j["peak"].is_null());
  CHECK(j["warnings"] == nlohmann::json::array({"a warning"}));
}

TEST_CASE("report: markdown rows and the bar's legend come from the rows", "[report]") {
  const RunSpec run = hand_run();
  const Estimate e = hand_built();
  const std::string md = render_markdown(run, e, ReportOptions{});
  CHECK_THAT(md, Catch::Contains("| parameters | bf16 | 2.00 | < 0.01 GB | basis of parameters |"));
  CHECK_THAT(md, Catch::Contains("| activations | - | - | not estimated |"));
  CHECK_THAT(md, Catch::Contains("(host)"));
  ReportOptions bytes;
  bytes.unit = Unit::bytes;
  // Without a peak the bar shows the device rows that hold bytes: parameters only here (the
  // unified and host rows are not on the device).
  const std::string bar = render_bar(e, std::nullopt, bytes);
  CHECK_THAT(bar, Catch::Contains("█ parameters 2,000 B"));
  CHECK_THAT(bar, !Catch::Contains("optimizer states"));
}

TEST_CASE("report: a check line per file and a summary of the verdicts", "[report]") {
  CheckResult fits{"a.json",
                   CheckStatus::fits,
                   {},
                   BudgetCheck{true, 10, 30, 20, 0},
                   Budget{40, 10, "budget 40B", false},
                   true};
  CheckResult over{"b.json",
                   CheckStatus::over,
                   {},
                   BudgetCheck{false, 50, 30, 0, 20},
                   Budget{40, 10, "budget 40B", false},
                   false};
  CheckResult bad{"c.json", CheckStatus::invalid, {"c.json: /x: one", "two"}, {}, {}, false};
  const std::string t = render_check_table({fits, over, bad}, Unit::bytes);
  CHECK_THAT(t, Catch::Contains("a.json: fits, headroom 20 B: needs 10 B of 30 B usable"));
  CHECK_THAT(t, Catch::Contains("b.json: over by 20 B: needs 50 B of 30 B usable"));
  CHECK_THAT(t, Catch::Contains("(activations not estimated)"));
  // A problem that names its file already is not prefixed twice.
  CHECK_THAT(t, Catch::Contains("c.json: invalid: /x: one\nc.json: invalid: two\n"));
  CHECK_THAT(t, Catch::EndsWith("1 fit, 1 over, 1 invalid\n"));
  const auto j = nlohmann::json::parse(render_check_json({fits, over, bad}));
  CHECK(j["results"].size() == 3);
  CHECK(j["summary"]["invalid"] == 1);
  CHECK(j["results"][1]["status"] == "over");
}
