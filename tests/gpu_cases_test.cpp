// The published GPU measurements (tests/data/gpu/cases.jsonl, sources in SOURCES.md there), run
// with the flags a user would type (tests/data/gpu/runs.jsonl). Each run is held to the bound
// written next to it, so that a change in either direction shows; docs/accuracy.md lists them.
#include "gpu_cases.hpp"

#include "testutil.hpp"

#include <set>

using memest::test::read_file;

namespace {
using memest::test::kRoot;
}

TEST_CASE("every published GPU run is within the bound it is held to", "[gpu]") {
  for (const auto& r : memest::gpu::results(kRoot)) {
    INFO(r.run.id << ": memest " << r.estimate << " B, measured " << r.run.measured << " B ("
                  << r.run.reads << "), error " << r.error * 100 << "%");
    CHECK(std::abs(r.error) <= r.run.held);
  }
}

TEST_CASE("every GPU case that is a target has a run, and every run a case", "[gpu]") {
  std::set<std::string> targets, runs;
  for (const auto& c : memest::truth::load_cases(kRoot + "/tests/data/gpu/cases.jsonl"))
    if (c["confidence"] != "low") targets.insert(c["id"].get<std::string>());
  for (const auto& r : memest::gpu::load_runs(kRoot)) {
    CHECK(r.held > 0);
    CHECK(r.held <= 2.0);
    runs.insert(r.id);
  }
  CHECK(runs == targets);
}

TEST_CASE("the metric a run reads is the one its case measured", "[gpu]") {
  for (const auto& r : memest::gpu::load_runs(kRoot)) {
    INFO(r.id << ": reads " << r.reads << ", measured " << r.metric);
    const std::string& m = r.metric;
    if (r.reads == "reserved") CHECK(m.find("reserved") != std::string::npos);
    if (r.reads == "nvidia-smi") CHECK(m.find("nvmlDeviceGetMemoryInfo") != std::string::npos);
    if (r.reads == "active") CHECK(m.find("active") != std::string::npos);
    if (r.reads == "allocated") CHECK(m.find("allocated") != std::string::npos);
  }
}

TEST_CASE("docs/accuracy.md lists the GPU runs as the current build estimates them", "[gpu]") {
  const std::string path = kRoot + "/docs/accuracy.md";
  const std::string doc = read_file(path);
  const std::string fresh = memest::truth::with_table(doc, memest::gpu::gpu_table(kRoot),
                                                      memest::gpu::kBegin, memest::gpu::kEnd);
  memest::test::expect_fresh_doc(path, fresh);
}

TEST_CASE("the README's GPU accuracy sentence is the current build's", "[gpu]") {
  const auto rs = memest::gpu::results(kRoot);
  const auto s = memest::gpu::summarise(rs);
  const auto within = static_cast<long>(s.within10 * static_cast<double>(rs.size()) + 0.5);
  const std::string want = fmt::format("median error is {:.1f}% and {} of {} are within 10%",
                                       s.median * 100, within, rs.size());
  std::string readme = read_file(kRoot + "/README.md");
  for (auto& c : readme)
    if (c == '\n') c = ' ';
  INFO("README.md should say: " << want);
  CHECK(readme.find(want) != std::string::npos);
}
