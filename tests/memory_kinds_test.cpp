// One word and one colour per kind of memory across the outputs (issue 23): the table's rows,
// the terminal bar, the step picture and (tests/web/page_test.js) the web page. The renderers
// are read as a user sees them and compared with each other, not with the table they read.
#include "testutil.hpp"

#include <memest/report.hpp>

#include <fmt/format.h>

#include <map>
#include <regex>
#include <string>

using namespace memest;
using memest::test::run_of;

namespace {

// The picture's legend: each swatch's fill and the words after it, without the size.
std::map<std::string, std::string> kinds_legend_svg(const std::string& svg) {
  std::map<std::string, std::string> out;
  static const std::regex row(
      R"re(<rect x="[0-9.]+" y="[0-9.]+" width="12" height="12" fill="(#[0-9a-f]{6})"/><text [^>]*>([^<]+?) (?:&lt; )?[0-9.]+ GB</text>)re");
  for (std::sregex_iterator it(svg.begin(), svg.end(), row), end; it != end; ++it) {
    out[(*it)[2]] = (*it)[1];
  }
  return out;
}

// The coloured bar's legend: each kind's 24-bit colour and the words after it.
std::map<std::string, std::string> kinds_legend_bar(const std::string& bar) {
  std::map<std::string, std::string> out;
  static const std::regex key(
      "\x1b\\[38;2;([0-9]+);([0-9]+);([0-9]+)m█\x1b\\[0m ([a-z ,]+?) (?:< )?[0-9.]+ GB");
  for (std::sregex_iterator it(bar.begin(), bar.end(), key), end; it != end; ++it) {
    out[(*it)[4]] = fmt::format("#{:02x}{:02x}{:02x}", std::stoi((*it)[1]), std::stoi((*it)[2]),
                                std::stoi((*it)[3]));
  }
  return out;
}

}  // namespace

TEST_CASE("memory kinds: the bar, the picture and the table use one word and one colour each",
          "[memory_kinds]") {
  // Mixed precision with AdamW: parameters, master weights, gradients, optimizer states and
  // activations all live at the peak.
  const RunSpec run = run_of("gpt2", "mixed", 2, 256);
  const Estimate e = estimate(run, EstimateOptions{.timeline = true});
  ReportOptions colour;
  colour.color = true;
  const auto svg = kinds_legend_svg(render_step_svg(run, e, colour));
  const auto bar = kinds_legend_bar(render_bar(e, std::nullopt, colour));
  REQUIRE(svg.size() >= 5);
  REQUIRE(bar.size() >= 5);
  std::size_t shared = 0;
  for (const auto& [label, fill] : bar) {
    if (!svg.contains(label)) continue;
    ++shared;
    CHECK(svg.at(label) == fill);
  }
  // The bar's one segment that is no part: what the device needs beyond the live tensors.
  CHECK(shared + (bar.contains("allocator rounding and context") ? 1 : 0) == bar.size());
  // The picture names each row's kind in the row's own words ("parameters", not "params").
  for (const Category& c : e.categories) {
    if (c.key == "params" || c.key == "grads" || c.key == "master_weights" ||
        c.key == "optimizer_states" || c.key == "activations") {
      CHECK(svg.contains(std::string(c.label)));
    }
  }
  // And the table's line of what is live at the peak does too.
  const std::string table = render_table(run, e, ReportOptions{});
  for (const auto& [label, fill] : svg) CHECK_THAT(table, Catch::Contains(label + " "));
}

TEST_CASE("memory kinds: every part and row has its own colour", "[memory_kinds]") {
  std::map<std::uint32_t, std::string_view> seen;
  for (const MemoryKind& k : memory_kinds()) {
    CHECK(seen.emplace(k.colour, k.label).second);
    CHECK(k.colour <= 0xffffff);
  }
  for (std::size_t i = 0; i < kPartCount; ++i) {
    CHECK(part_kind(static_cast<Part>(i)).part == part_name(static_cast<Part>(i)));
  }
}
