// libFuzzer target: a Hugging Face config.json through the loader and the estimate of a step.
// Any memest::Error is a correct answer to bad input; anything else (a crash, a sanitizer
// report, another exception, a hang) is a finding. See docs/hardening.md.
#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/hf_config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    memest::RunSpec run;
    run.model = memest::parse_hf_config(text, "fuzz.json");
    run.training.micro_batch = 2;
    run.training.seq_len = 128;
    (void)memest::estimate(run);
  } catch (const memest::Error&) {
  }
  return 0;
}
