// libFuzzer target: the GGUF header reader (src/serve/gguf_header.cpp) and the model
// `memest serve --gguf` builds from its metadata, with their contracts checked: a refusal is an
// Error of one line naming the source and the offset, never a crash or an unbounded allocation;
// a header that reads has tensors of whole blocks whose bytes fit in the input's claims.
#include "serve/gguf_header.hpp"

#include <memest/error.hpp>
#include <memest/serve.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const unsigned char> bytes(data, size);
  memest::GgufHeader h;
  try {
    h = memest::parse_gguf_header(bytes, "fuzz.gguf", size);
  } catch (const memest::Error& e) {
    const std::string m = e.what();
    require(m.starts_with("fuzz.gguf: offset ") && m.find('\n') == std::string::npos);
    return 0;
  }
  require(h.version == 2 || h.version == 3);
  for (const memest::GgufTensorInfo& t : h.tensors) require(t.dims.size() <= 4);
  try {
    const memest::ServeModel m = memest::gguf_serve_model(h, "fuzz.gguf");
    memest::LlamaCppSettings s;
    s.ctx_size = 512;  // the header's weights and a small cache: the weights are what is fuzzed
    const memest::ServeEstimate e = memest::estimate_gguf(m, s, h);
    require(e.weights_bytes.has_value());
  } catch (const memest::Error& e) {
    require(std::string(e.what()).find('\n') == std::string::npos);
  }
  return 0;
}
