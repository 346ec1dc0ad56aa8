// The web page's entry point: memest's command line run in-process (memest::cli::run) with the
// arguments the page built from its form, so every answer, default and message is the CLI's.
// The page (web/app.js) calls memest_run with the arguments as a JSON array of strings and gets
// back {"code": exit code, "out": what the CLI printed, "err": its error lines}.
#include "cli/cli.hpp"

#include <memest/step.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <emscripten/emscripten.h>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Json = nlohmann::ordered_json;

std::string run_words(const Json& words) {
  std::vector<std::string> args = {"memest"};
  for (const auto& w : words) args.push_back(w.get<std::string>());
  std::ostringstream out, err;
  const int code = memest::cli::run(args, out, err);
  const Json result = {{"code", code}, {"out", out.str()}, {"err", err.str()}};
  return result.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

/// Runs `memest <args...>`: `args_json` is a JSON array of strings. The result stays valid until
/// the next call.
extern "C" EMSCRIPTEN_KEEPALIVE const char* memest_run(const char* args_json) {
  static std::string result;
  try {
    result = run_words(Json::parse(args_json));
  } catch (const std::exception& e) {  // the page passed something other than strings
    const Json bug = {{"code", memest::cli::kExitBug},
                      {"out", ""},
                      {"err", std::string("memest: internal error: ") + e.what() + "\n"}};
    result = bug.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return result.c_str();
}

/// How memest names and colours each kind of memory (src/step/memory_kinds.cpp), so the page's
/// bars and tables use the words and colours of the table, the terminal bar and the pictures:
/// a JSON array of {"part", "category", "label", "colour": "#rrggbb"}.
extern "C" EMSCRIPTEN_KEEPALIVE const char* memest_kinds() {
  static const std::string kinds = [] {
    Json out = Json::array();
    for (const memest::MemoryKind& k : memest::memory_kinds()) {
      out.push_back({{"part", k.part},
                     {"category", k.category},
                     {"label", k.label},
                     {"colour", fmt::format("#{:06x}", k.colour)}});
    }
    return out.dump();
  }();
  return kinds.c_str();
}
