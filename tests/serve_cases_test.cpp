// memest serve against the published start-up logs (tests/data/inference/cases.jsonl) with the
// launch lines of tests/data/inference/runs.jsonl: every printed figure memest gives is held to
// the bound (weights and KV within 2%, vLLM's profile peak and llama.cpp's compute
// buffer within 20%) unless runs.jsonl lists it as unmet, and then it must stay unmet, so the
// list (and docs/serving.md's explanations) stays true. docs/accuracy.md shows the table.
#include "serve_cases.hpp"

#include "testutil.hpp"

#include <set>

namespace {
using memest::test::kRoot;
}

TEST_CASE("serve: every printed figure is within its bound, or listed as unmet and outside it",
          "[serve]") {
  for (const auto& r : memest::serve_cases::results(kRoot)) {
    for (const auto& f : r.figures) {
      INFO(r.run.id << " " << f.name << ": memest " << f.memest << ", printed " << f.printed
                    << ", error " << f.error * 100 << "%");
      if (f.kind->bound == 0) continue;
      CHECK(f.met() == f.expected);
    }
  }
}

TEST_CASE("serve: every copied log has a run, every run compares figures, unmet names exist",
          "[serve]") {
  std::set<std::string> logs, runs;
  for (const auto& c : memest::truth::load_cases(kRoot + "/tests/data/inference/cases.jsonl"))
    logs.insert(c["id"].get<std::string>());
  for (const auto& r : memest::serve_cases::results(kRoot)) {
    INFO(r.run.id);
    runs.insert(r.run.id);
    CHECK(!r.figures.empty());
    std::set<std::string> names;
    for (const auto& f : r.figures) names.insert({f.name, f.kind->what});
    for (const auto& u : r.run.unmet) CHECK(names.count(u) == 1);
    for (const auto& [what, why] : r.run.skip) CHECK(!why.empty());
  }
  CHECK(runs == logs);
}

TEST_CASE("docs/accuracy.md lists the serving logs as the current build estimates them",
          "[serve]") {
  const std::string path = kRoot + "/docs/accuracy.md";
  const std::string doc = memest::test::read_file(path);
  namespace sc = memest::serve_cases;
  const std::string fresh =
      memest::truth::with_table(doc, sc::serve_table(kRoot), sc::kBegin, sc::kEnd);
  memest::test::expect_fresh_doc(path, fresh);
}
