#pragma once
// Private to src/serve: a GGUF file's header (magic, version, metadata, tensor infos) as ggml
// defines it (ggml/src/gguf.cpp, gguf_init_from_reader, read at llama.cpp commit
// 067d44f6c48459f7a82dbafc6fbd0bae97755a4e), read without the weights (src/serve/gguf_header.cpp).

#include <memest/units.hpp>

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// GGUF's value types (enum gguf_type), numbered as in the file.
enum class GgufType : std::uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

/// One metadata value: a scalar, a string, or an array of either (never of arrays, as in ggml).
struct GgufValue {
  GgufType type = GgufType::uint8;
  GgufType element = GgufType::uint8;  ///< an array's element type
  u64 count = 0;                       ///< an array's length
  u64 unsigned_value = 0;              ///< unsigned integers and bools
  std::int64_t signed_value = 0;       ///< signed integers
  double float_value = 0;              ///< f32 and f64
  std::string text;                    ///< a string
  std::vector<std::string> texts;      ///< an array of strings
  std::string raw;                     ///< an array of numbers, as the file stores them
};

/// One tensor's info: its name, dims (ne[0] first, the row), ggml type and data offset.
struct GgufTensorInfo {
  std::string name;
  std::vector<u64> dims;
  std::uint32_t type = 0;
  std::string type_name;  ///< ggml_type_name: "q4_K", "f16", ...
  u64 offset = 0;
  u64 bytes = 0;  ///< ggml_nbytes: rows x whole blocks of the type
};

struct GgufHeader {
  std::uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;
};

/// The most of a file the reader looks at: a header past it is refused.
inline constexpr u64 kGgufHeaderCap = 64ULL << 20;

/// The header in `bytes`, the start of the file `source` (which is `file_size` long). Throws
/// Error "<source>: offset N: ..." naming what was expected for a file that is truncated, not
/// GGUF, of another version or with an unknown type.
GgufHeader parse_gguf_header(std::span<const unsigned char> bytes, const std::string& source,
                             u64 file_size);

/// The header of the GGUF file at `path` (at most kGgufHeaderCap bytes read).
GgufHeader read_gguf_header(const std::string& path);

/// `text` as an error message may show it: bytes outside printable ASCII as \\xNN, cut after
/// `limit` bytes with "..." (a key or a value from a file may be anything).
std::string gguf_shown(std::string_view text, std::size_t limit);

/// The metadata value `key` as an unsigned integer, if it is one.
std::optional<u64> gguf_unsigned(const GgufHeader& h, const std::string& key);

// What `memest serve --gguf` takes from a header (src/serve/gguf_model.cpp).
struct ServeModel;
struct ServeEstimate;
struct LlamaCppSettings;

/// The model's shapes from the header's metadata ({arch}.block_count, embedding_length, ...,
/// the vocabulary from tokenizer.ggml.tokens), read as the config.json they stand for. Throws
/// Error naming `source` and the key for a missing or unusable value.
ServeModel gguf_serve_model(const GgufHeader& h, const std::string& source);

/// llama.cpp's estimate with the weights of the header: each tensor's own type and dims,
/// token_embd in host memory, blk.N on layer N's device, the other tensors (the output, and
/// token_embd's copy where the output is tied to it) on the output's device.
ServeEstimate estimate_gguf(const ServeModel& m, const LlamaCppSettings& s, const GgufHeader& h);

}  // namespace memest
