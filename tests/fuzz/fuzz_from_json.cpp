// libFuzzer target: a framework's config file (memest --from, the json reader) through the
// format's mapping, resolve() and the estimate. Any memest::Error is a correct answer to bad
// input; anything else is a finding.
#include <memest/config.hpp>
#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/from.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const memest::RunOptions options = memest::parse_from_text(text, "fuzz.json", {}, {});
    (void)memest::estimate(memest::resolve(options));
  } catch (const memest::Error&) {
  }
  return 0;
}
