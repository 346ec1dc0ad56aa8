// libFuzzer target: a run config through the loader, resolve() and the estimate. Any
// memest::Error is a correct answer to bad input; anything else is a finding.
#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/run_config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const memest::RunSpec run = memest::resolve(memest::parse_run_config(text, "fuzz.json"));
    (void)memest::estimate(run);
  } catch (const memest::Error&) {
  }
  return 0;
}
