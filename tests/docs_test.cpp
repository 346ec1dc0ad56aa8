// The counts and maps the README and ARCHITECTURE.md state, checked against the tree and the
// build, so that they cannot drift (the README once said 50 presets when there were 55).
#include "testutil.hpp"

#include <memest/hf_config.hpp>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

namespace {

namespace fs = std::filesystem;
using memest::test::kRoot;

std::string text(const std::string& rel) { return memest::test::read_file(kRoot + "/" + rel); }

// Every match of `pattern`'s first group in `s`.
std::set<std::string> all(const std::string& s, const std::string& pattern) {
  std::set<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(s.begin(), s.end(), re); it != std::sregex_iterator(); ++it)
    out.insert((*it)[1].str());
  return out;
}

}  // namespace

TEST_CASE("the README's count of presets is the build's", "[docs]") {
  const auto counts = all(text("README.md"), R"(`memest models` lists (\d+))");
  REQUIRE(counts.size() == 1);
  CHECK(std::stoul(*counts.begin()) == memest::model_presets().size());
}

TEST_CASE("the README's map of docs/ names every page in docs/ and no other", "[docs]") {
  std::set<std::string> pages;
  for (const auto& e : fs::directory_iterator(kRoot + "/docs"))
    if (e.path().extension() == ".md") pages.insert("docs/" + e.path().filename().string());
  const std::string readme = text("README.md");
  const auto map = readme.substr(readme.find("### docs/"));
  CHECK(all(map, R"(\| `(docs/[\w.-]+\.md)` \|)") == pages);
}

TEST_CASE("ARCHITECTURE.md gives every folder of src/ its sentence, and only those", "[docs]") {
  std::set<std::string> folders;
  for (const auto& e : fs::recursive_directory_iterator(kRoot + "/src"))
    if (e.is_directory())
      folders.insert("src/" + fs::relative(e.path(), kRoot + "/src").generic_string() + "/");
  const auto described = all(text("ARCHITECTURE.md"), R"(\n- `(src/[\w/]+/)`:)");
  CHECK(described == folders);
  // The worked example points at a rule file that exists.
  const auto rules = all(text("ARCHITECTURE.md"), R"(`(src/step/rules/\w+\.cpp)`)");
  REQUIRE_FALSE(rules.empty());
  for (const auto& r : rules) CHECK(fs::exists(kRoot + "/" + r));
}
