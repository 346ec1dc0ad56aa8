// Every example in README.md marked `<!-- readme-test -->` is run here and compared with what
// the README shows, so the README cannot drift from the build. MEMEST_UPDATE_GOLDEN=1 rewrites
// the README's blocks from the current build.
#include "testutil.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace {

std::vector<std::string> split_words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

struct Block {
  std::size_t body_begin, body_end;  // offsets of the expected output in the README text
  std::string command;               // "memest --params 7B"
};

std::vector<Block> find_blocks(const std::string& text) {
  std::vector<Block> blocks;
  const std::string marker = "<!-- readme-test -->\n```console\n$ ";
  for (auto pos = text.find(marker); pos != std::string::npos; pos = text.find(marker, pos + 1)) {
    const auto cmd_begin = pos + marker.size();
    const auto cmd_end = text.find('\n', cmd_begin);
    const auto body_end = text.find("```\n", cmd_end + 1);
    blocks.push_back({cmd_end + 1, body_end, text.substr(cmd_begin, cmd_end - cmd_begin)});
  }
  return blocks;
}

}  // namespace

TEST_CASE("README examples are the current build's output", "[readme]") {
  const std::string path = std::string(MEMEST_SOURCE_DIR) + "/README.md";
  std::string text = memest::test::read_file(path);
  auto blocks = find_blocks(text);
  REQUIRE(blocks.size() >= 6);
  const char* update = std::getenv("MEMEST_UPDATE_GOLDEN");
  // Walk backwards so that rewriting a block keeps the earlier offsets valid.
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    auto words = split_words(it->command);
    REQUIRE(words.at(0) == "memest");
    words.erase(words.begin());
    auto r = memest::test::run_cli(words);
    CAPTURE(it->command, r.err);
    REQUIRE(r.code == 0);
    if (update && std::string(update) == "1") {
      text.replace(it->body_begin, it->body_end - it->body_begin, r.out);
    } else {
      REQUIRE(text.substr(it->body_begin, it->body_end - it->body_begin) == r.out);
    }
  }
  if (update && std::string(update) == "1") std::ofstream(path, std::ios::binary) << text;
}
