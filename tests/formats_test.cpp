// Issue 23, part 4: compare takes the budget, and Markdown is offered wherever --help lists it,
// with every figure under the table's label and every note kept.
#include "testutil.hpp"

#include <algorithm>
#include <sstream>

using memest::test::run_cli;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("compare says which policy fits the budget, exit 1 when none does", "[cli]") {
  // The case: every policy over an H100, exit 0 and no word of the budget.
  const std::vector<std::string> over = {"compare", "--model", "mistral-7b-v0.1", "--batch",  "2",
                                         "--seq",   "4096",    "--gpu",           "h100-80gb"};
  auto r = run_cli(over);
  INFO(r.out << r.err);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("on h100-80gb") && Catch::Contains("over by"));
  std::vector<std::string> json_args = over;
  json_args.insert(json_args.end(), {"--format", "json"});
  const auto j = nlohmann::json::parse(run_cli(json_args).out);
  REQUIRE(j["budget"]["source"] == "h100-80gb");
  for (const auto& run : j["runs"]) {
    CHECK(run["budget"]["fits"] == false);
    CHECK(run["budget"]["need_bytes"].get<std::uint64_t>() >
          j["budget"]["usable_bytes"].get<std::uint64_t>());
  }
  auto fits = run_cli(
      {"compare", "--model", "llama-3.2-1b", "--batch", "1", "--seq", "512", "--gpu", "h100-80gb"});
  CHECK(fits.code == 0);
  CHECK_THAT(fits.out, Catch::Contains("headroom on h100-80gb") && !Catch::Contains("over by"));
  // Without a budget, nothing about one.
  auto none = run_cli({"compare", "--model", "llama-3.2-1b", "--batch", "1", "--seq", "512"});
  CHECK(none.code == 0);
  CHECK_THAT(none.out, !Catch::Contains("headroom") && !Catch::Contains("over by"));
}

TEST_CASE("markdown is taken by every command whose help lists --format markdown", "[cli]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"compare", "--model", "llama-3.2-1b", "--batch", "1", "--seq", "512"},
           {"fit", "--model", "llama-3.2-1b", "--seq", "512", "--gpu", "a10"},
           {"fit", "--gpus", "2", "--model", "llama-3.2-1b", "--seq", "512", "--gpu", "a10"},
           {"gpus"},
           {"models", "llama"}}) {
    std::vector<std::string> md = args;
    md.insert(md.end(), {"--format", "markdown"});
    auto r = run_cli(md);
    CAPTURE(md, r.err);
    CHECK((r.code == 0 || r.code == 1));  // 1: nothing fits, said in Markdown
    CHECK(r.err.empty());
    CHECK(!r.out.empty());
  }
}

TEST_CASE("markdown labels each figure as the table does and keeps every note", "[cli]") {
  const std::vector<std::string> run = {"--model", "llama-3.2-1b", "--batch", "1",     "--seq",
                                        "512",     "--dp",         "2",       "--gpu", "a10"};
  auto table = run_cli(run);
  std::vector<std::string> md_args = run;
  md_args.insert(md_args.end(), {"--format", "markdown"});
  auto md = run_cli(md_args);
  REQUIRE(md.code == table.code);
  // The figure the old Markdown called "needed: sum of the rows above" was the peak.
  CHECK_THAT(md.out, !Catch::Contains("sum of the rows above"));
  std::vector<std::string> json_args = run;
  json_args.insert(json_args.end(), {"--format", "json"});
  const auto j = nlohmann::json::parse(run_cli(json_args).out);
  for (const auto& line : lines_of(table.out)) {
    CAPTURE(line);
    // Every total, peak and note line of the table appears in the Markdown as it is.
    if (line.starts_with("note:") || line.starts_with("warning:") || line.starts_with("assumed:") ||
        line.starts_with("peak over a step") || line.starts_with("  live at the peak")) {
      CHECK_THAT(md.out, Catch::Contains(line));
    }
    if (line.starts_with("device total")) {
      const std::string label = line.substr(0, line.find(')') + 1);
      CHECK_THAT(md.out, Catch::Contains("**" + label + "**"));
    }
  }
  CHECK_THAT(md.out, Catch::Contains("note: --dp 2"));
  // The budget line says what is needed, which is the JSON's need, not a sum of rows.
  CHECK_THAT(md.out, Catch::Contains("Budget: "));
  CHECK(j["budget"]["need_bytes"].get<std::uint64_t>() >= j["total"]["bytes"].get<std::uint64_t>());
}

TEST_CASE("a split model's header names the whole model, then the device's share", "[cli]") {
  const auto whole = run_cli({"--model", "llama-2-7b", "--batch", "1", "--seq", "128"});
  const std::string first = whole.out.substr(0, whole.out.find('\n'));
  REQUIRE_THAT(first, Catch::Contains("6,738,415,616 parameters"));
  for (const auto& split :
       std::vector<std::vector<std::string>>{{"--tp", "2"}, {"--pp", "2", "--microbatches", "2"}}) {
    std::vector<std::string> args = {"--model", "llama-2-7b", "--batch", "1", "--seq", "128"};
    args.insert(args.end(), split.begin(), split.end());
    const auto r = run_cli(args);
    CAPTURE(args);
    REQUIRE(r.code == 0);
    const auto lines = lines_of(r.out);
    CHECK(lines.at(0) == first);  // once named only one rank's 3.4B
    CHECK(lines.at(1).starts_with("per device "));
    CHECK_THAT(lines.at(1), !Catch::Contains("6,738,415,616"));
  }
}
