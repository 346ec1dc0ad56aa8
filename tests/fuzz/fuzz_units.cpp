// libFuzzer target: the count, size and unit parsers, with their contracts checked: a count is
// positive, a size positive, and a size printed in bytes reads back to itself.
#include <memest/error.hpp>
#include <memest/units.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    require(memest::parse_count(text) > 0);
  } catch (const memest::Error&) {
  }
  try {
    const std::uint64_t bytes = memest::parse_bytes(text);
    require(bytes > 0);
    require(memest::parse_bytes(std::to_string(bytes) + "B") == bytes);
    (void)memest::format_bytes(bytes, memest::Unit::GiB);
  } catch (const memest::Error&) {
  }
  try {
    const memest::Unit unit = memest::parse_unit(text);
    require(memest::unit_bytes(unit) > 0);
  } catch (const memest::Error&) {
  }
  return 0;
}
