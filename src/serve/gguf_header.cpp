// A GGUF header read as ggml's gguf_init_from_reader reads one (ggml/src/gguf.cpp at llama.cpp
// commit 067d44f6c48459f7a82dbafc6fbd0bae97755a4e): "GGUF", a u32 version (2 or 3 here; ggml
// refuses 1), u64 tensor and key/value counts, the key/value pairs (a string key, a u32 type, the
// value; an array is an element type, a u64 length and the elements, never arrays), then per
// tensor its name (< 64 bytes), u32 n_dims (<= 4), i64 dims, i32 ggml type and u64 offset. All
// little-endian. Hostile input: every count and length is checked against the bytes left before
// anything is allocated from it, and the reader looks at no more than kGgufHeaderCap bytes.
#include "serve/gguf_header.hpp"

#include "serve/ggml_types.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace memest {
namespace {

// Bytes of one element of a scalar GGUF type; 0 for string and array.
u64 scalar_size(GgufType t) {
  switch (t) {
    case GgufType::uint8:
    case GgufType::int8:
    case GgufType::boolean:
      return 1;
    case GgufType::uint16:
    case GgufType::int16:
      return 2;
    case GgufType::uint32:
    case GgufType::int32:
    case GgufType::float32:
      return 4;
    case GgufType::uint64:
    case GgufType::int64:
    case GgufType::float64:
      return 8;
    default:
      return 0;
  }
}

// The bytes of the header and where the reader stands in them.
class GgufCursor {
 public:
  GgufCursor(std::span<const unsigned char> bytes, const std::string& source, u64 file_size)
      : bytes_(bytes), source_(source), file_size_(file_size) {}

  u64 offset() const { return pos_; }
  u64 left() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(u64 at, std::string_view what) const {
    throw Error(fmt::format("{}: offset {}: {}", source_, at, gguf_shown(what, 400)));
  }

  // The next `n` bytes, for `what`; a file that ends first is truncated, a header past the cap
  // is refused.
  std::span<const unsigned char> take(u64 n, std::string_view what) {
    if (n > left()) {
      if (bytes_.size() < file_size_) {
        fail(pos_, fmt::format("expected {} within the first {} MiB (a GGUF header larger "
                               "than that is not read)",
                               what, kGgufHeaderCap >> 20));
      }
      fail(pos_, fmt::format("expected {} ({} bytes), the file ends at {} (truncated)", what, n,
                             file_size_));
    }
    const auto s = bytes_.subspan(pos_, n);
    pos_ += n;
    return s;
  }

  u64 little_endian(u64 n, std::string_view what) {
    const auto s = take(n, what);
    u64 v = 0;
    for (u64 i = n; i-- > 0;) v = (v << 8) | s[i];
    return v;
  }

  std::uint32_t uint32le(std::string_view what) {
    return static_cast<std::uint32_t>(little_endian(4, what));
  }
  u64 uint64le(std::string_view what) { return little_endian(8, what); }

  std::string string(std::string_view what) {
    const u64 at = pos_;
    const u64 n = uint64le(fmt::format("the length of {}", what));
    if (n > left()) {
      fail(at,
           fmt::format("expected the length of {}, got {} with {} bytes left", what, n, left()));
    }
    const auto s = take(n, what);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }

 private:
  std::span<const unsigned char> bytes_;
  const std::string& source_;
  u64 file_size_;
  u64 pos_ = 0;
};

GgufType value_type(GgufCursor& c, std::string_view key) {
  const u64 at = c.offset();
  const std::uint32_t t = c.uint32le(fmt::format("the type of \"{}\"", key));
  if (t > static_cast<std::uint32_t>(GgufType::float64)) {
    c.fail(at, fmt::format("expected a GGUF value type (0-12) for \"{}\", got {}", key, t));
  }
  return static_cast<GgufType>(t);
}

void read_scalar(GgufCursor& c, GgufValue& v, std::string_view key) {
  const u64 n = scalar_size(v.type);
  const u64 bits = c.little_endian(n, fmt::format("the value of \"{}\"", key));
  if (v.type == GgufType::float32) {
    float f = 0;
    const auto b = static_cast<std::uint32_t>(bits);
    std::memcpy(&f, &b, sizeof f);
    v.float_value = static_cast<double>(f);
  } else if (v.type == GgufType::float64) {
    std::memcpy(&v.float_value, &bits, sizeof bits);
  } else if (v.type == GgufType::int8 || v.type == GgufType::int16 || v.type == GgufType::int32 ||
             v.type == GgufType::int64) {
    const u64 sign = n < 8 ? (bits >> (8 * n - 1)) & 1 : 0;
    v.signed_value = static_cast<std::int64_t>(sign ? bits | (~0ULL << (8 * n)) : bits);
  } else {
    v.unsigned_value = bits;
  }
}

// An array: its element type (a scalar or a string, as ggml allows), its length, checked against
// the bytes left before anything is reserved, and its elements.
void read_array(GgufCursor& c, GgufValue& v, const std::string& key) {
  const u64 at = c.offset();
  v.element = value_type(c, key);
  if (v.element == GgufType::array) {
    c.fail(at, fmt::format("expected an array of scalars or strings for \"{}\", got an array "
                           "of arrays",
                           key));
  }
  const u64 count_at = c.offset();
  v.count = c.uint64le(fmt::format("the length of the array \"{}\"", key));
  const u64 least = v.element == GgufType::string ? 8 : scalar_size(v.element);
  if (v.count > c.left() / least) {
    c.fail(count_at, fmt::format("expected an array length for \"{}\" that fits the {} bytes "
                                 "left, got {}",
                                 key, c.left(), v.count));
  }
  if (v.element != GgufType::string) {
    const auto s = c.take(v.count * least, fmt::format("the elements of \"{}\"", key));
    v.raw.assign(reinterpret_cast<const char*>(s.data()), s.size());
    return;
  }
  v.texts.reserve(v.count);
  for (u64 i = 0; i < v.count; ++i) {
    v.texts.push_back(c.string(fmt::format("element {} of \"{}\"", i, key)));
  }
}

void read_metadata(GgufCursor& c, GgufHeader& h, u64 n_kv) {
  for (u64 i = 0; i < n_kv; ++i) {
    const u64 at = c.offset();
    std::string key = c.string(fmt::format("the key of metadata pair {}", i));
    const std::string shown = gguf_shown(key, 80);  // the key as messages name it
    if (key.empty()) c.fail(at, fmt::format("expected a key for metadata pair {}, got \"\"", i));
    if (h.metadata.contains(key)) {
      c.fail(at,
             fmt::format("expected a new key for metadata pair {}, got \"{}\" again", i, shown));
    }
    GgufValue v;
    v.type = value_type(c, shown);
    if (v.type == GgufType::array) {
      read_array(c, v, shown);
    } else if (v.type == GgufType::string) {
      v.text = c.string(fmt::format("the value of \"{}\"", shown));
    } else {
      read_scalar(c, v, shown);
    }
    h.metadata.emplace(std::move(key), std::move(v));
  }
}

const GgufTypeTraits* ggml_type(std::uint32_t id) {
  for (const GgufTypeTraits& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

// The tensor's ggml type, and its bytes: whole blocks per row times the rows (ggml_nbytes).
void type_tensor(GgufCursor& c, GgufTensorInfo& t) {
  const u64 at = c.offset();
  t.type = c.uint32le(fmt::format("the ggml type of tensor \"{}\"", t.name));
  const GgufTypeTraits* traits = ggml_type(t.type);
  if (!traits) {
    c.fail(at, fmt::format("expected a ggml type for tensor \"{}\", got {}", t.name, t.type));
  }
  t.type_name = std::string(traits->name);
  const u64 row = t.dims.empty() ? 1 : t.dims[0];
  if (row % traits->block != 0) {
    c.fail(at, fmt::format("expected rows of whole {}-element blocks for tensor \"{}\" ({}), "
                           "got {} elements",
                           traits->block, t.name, traits->name, row));
  }
  try {
    u64 rows = 1;
    for (std::size_t d = 1; d < t.dims.size(); ++d) rows = checked_mul(rows, t.dims[d]);
    t.bytes = checked_mul(rows, checked_mul(row / traits->block, traits->bytes));
  } catch (const SizeOverflow&) {
    c.fail(at, fmt::format("expected a tensor size below 2^64 bytes for \"{}\"", t.name));
  }
}

GgufTensorInfo read_tensor_info(GgufCursor& c, u64 i) {
  GgufTensorInfo t;
  const u64 at = c.offset();
  t.name = c.string(fmt::format("the name of tensor {}", i));
  if (t.name.size() >= 64) {
    c.fail(at, fmt::format("expected a tensor name under 64 bytes (GGML_MAX_NAME), got {} bytes",
                           t.name.size()));
  }
  const u64 dims_at = c.offset();
  const std::uint32_t n_dims =
      c.uint32le(fmt::format("the dimension count of tensor \"{}\"", t.name));
  if (n_dims > 4) {
    c.fail(dims_at, fmt::format("expected at most 4 dimensions (GGML_MAX_DIMS) for tensor "
                                "\"{}\", got {}",
                                t.name, n_dims));
  }
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const u64 dim_at = c.offset();
    const u64 ne = c.uint64le(fmt::format("dimension {} of tensor \"{}\"", d, t.name));
    if (ne >> 63) c.fail(dim_at, fmt::format("expected a dimension >= 0 for \"{}\"", t.name));
    t.dims.push_back(ne);
  }
  type_tensor(c, t);
  t.offset = c.uint64le(fmt::format("the data offset of tensor \"{}\"", t.name));
  return t;
}

}  // namespace

std::string gguf_shown(std::string_view text, std::size_t limit) {
  std::string out;
  for (const char ch : text.substr(0, limit)) {
    const auto b = static_cast<unsigned char>(ch);
    out += b >= 0x20 && b < 0x7f ? std::string(1, ch) : fmt::format("\\x{:02x}", b);
  }
  return text.size() > limit ? out + "..." : out;
}

GgufHeader parse_gguf_header(std::span<const unsigned char> bytes, const std::string& source,
                             u64 file_size) {
  GgufCursor c(bytes, source, std::max<u64>(file_size, bytes.size()));
  GgufHeader h;
  const auto magic = c.take(4, "the magic \"GGUF\"");
  if (std::memcmp(magic.data(), "GGUF", 4) != 0) c.fail(0, "expected the magic \"GGUF\"");
  h.version = c.uint32le("the GGUF version");
  if (h.version != 2 && h.version != 3) {
    c.fail(4, fmt::format("expected GGUF version 2 or 3, got {}", h.version));
  }
  const u64 n_tensors = c.uint64le("the tensor count");
  const u64 n_kv = c.uint64le("the metadata count");
  // A pair takes at least 13 bytes (key length, type, a byte), a tensor info 24.
  if (n_kv > c.left() / 13) {
    c.fail(16, fmt::format("expected a metadata count that fits the {} bytes left, got {}",
                           c.left(), n_kv));
  }
  read_metadata(c, h, n_kv);
  if (n_tensors > c.left() / 24) {
    c.fail(8, fmt::format("expected a tensor count that fits the {} bytes left, got {}", c.left(),
                          n_tensors));
  }
  h.tensors.reserve(n_tensors);
  for (u64 i = 0; i < n_tensors; ++i) h.tensors.push_back(read_tensor_info(c, i));
  return h;
}

GgufHeader read_gguf_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(fmt::format("{}: cannot open file: {}", path, std::strerror(errno)));
  const auto end = in.tellg();
  if (end < 0) throw Error(fmt::format("{}: cannot read file", path));
  const u64 size = static_cast<u64>(end);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(std::min(size, kGgufHeaderCap)));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw Error(fmt::format("{}: cannot read file", path));
  return parse_gguf_header(bytes, path, size);
}

std::optional<u64> gguf_unsigned(const GgufHeader& h, const std::string& key) {
  const auto it = h.metadata.find(key);
  if (it == h.metadata.end()) return std::nullopt;
  const GgufValue& v = it->second;
  const bool is_unsigned = v.type == GgufType::uint8 || v.type == GgufType::uint16 ||
                           v.type == GgufType::uint32 || v.type == GgufType::uint64;
  if (is_unsigned) return v.unsigned_value;
  const bool is_signed = v.type == GgufType::int8 || v.type == GgufType::int16 ||
                         v.type == GgufType::int32 || v.type == GgufType::int64;
  if (is_signed && v.signed_value >= 0) return static_cast<u64>(v.signed_value);
  return std::nullopt;
}

}  // namespace memest
