// The GGUF header reader (src/serve/gguf_header.cpp) and `memest serve --gguf`: a file written
// here, field by field with memcpy of native little-endian values (not the reader's byte
// shifts), read back; every truncation, a wrong magic or version, and hostile counts refused
// with one line naming the file and the offset.
#include "serve/gguf_header.hpp"
#include "testutil.hpp"

#include <memest/error.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <fstream>

namespace {

static_assert(std::endian::native == std::endian::little, "the writer stores native values");

struct GgufWriter {
  std::vector<unsigned char> bytes;

  template <class T>
  void value(T v) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes.insert(bytes.end(), b, b + sizeof(T));
  }
  void text(const std::string& s) {
    value<std::uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void key(const std::string& k, std::uint32_t type) {
    text(k);
    value(type);
  }
  void tensor(const std::string& name, std::vector<std::int64_t> dims, std::uint32_t type) {
    text(name);
    value<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (const std::int64_t d : dims) value(d);
    value(type);
    value<std::uint64_t>(0);
  }
};

// ggml_type ids and block sizes from ggml's type traits: q4_K 144 bytes per 256, q6_K 210 per
// 256, f32 4 per element.
constexpr std::uint32_t kGgufF32 = 0, kGgufQ4K = 12, kGgufQ6K = 14;

struct GgufTestTensor {
  std::string name;
  std::vector<std::int64_t> dims;
  std::uint32_t type;
  std::uint64_t bytes;  // rows x blocks per row x bytes per block
};

std::vector<GgufTestTensor> gguf_test_tensors() {
  std::vector<GgufTestTensor> t = {{"token_embd.weight", {256, 1000}, kGgufQ4K, 1000 * 144}};
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.push_back({b + "attn_q.weight", {256, 256}, kGgufQ4K, 256 * 144});
    t.push_back({b + "attn_k.weight", {256, 128}, kGgufQ4K, 128 * 144});
    t.push_back({b + "attn_v.weight", {256, 128}, kGgufQ6K, 128 * 210});
    t.push_back({b + "attn_output.weight", {256, 256}, kGgufQ4K, 256 * 144});
    t.push_back({b + "ffn_gate.weight", {256, 512}, kGgufQ4K, 512 * 144});
    t.push_back({b + "ffn_up.weight", {256, 512}, kGgufQ4K, 512 * 144});
    t.push_back({b + "ffn_down.weight", {512, 256}, kGgufQ6K, 256 * 2 * 210});
    t.push_back({b + "attn_norm.weight", {256}, kGgufF32, 256 * 4});
  }
  t.push_back({"output_norm.weight", {256}, kGgufF32, 256 * 4});
  t.push_back({"output.weight", {256, 1000}, kGgufQ6K, 1000 * 210});
  return t;
}

// A two-layer Llama: its shapes, a vocabulary of 1,000 tokens, a float, a negative int and an
// array of u16 besides, then the tensors.
std::vector<unsigned char> gguf_test_file(std::uint32_t block_count = 2) {
  GgufWriter w;
  const auto tensors = gguf_test_tensors();
  w.bytes = {'G', 'G', 'U', 'F'};
  w.value<std::uint32_t>(3);
  w.value<std::uint64_t>(tensors.size());
  w.value<std::uint64_t>(11);
  w.key("general.architecture", 8);
  w.text("llama");
  const std::pair<const char*, std::uint32_t> shapes[] = {
      {"llama.block_count", block_count},   {"llama.embedding_length", 256},
      {"llama.feed_forward_length", 512},   {"llama.attention.head_count", 4},
      {"llama.attention.head_count_kv", 2}, {"llama.context_length", 4096}};
  for (const auto& [k, v] : shapes) {
    w.key(k, 4);
    w.value(v);
  }
  w.key("tokenizer.ggml.tokens", 9);
  w.value<std::uint32_t>(8);
  w.value<std::uint64_t>(1000);
  for (int i = 0; i < 1000; ++i) w.text("t" + std::to_string(i));
  w.key("llama.rope.freq_base", 6);
  w.value<float>(500000.0f);
  w.key("test.negative", 5);
  w.value<std::int32_t>(-7);
  w.key("test.u16s", 9);
  w.value<std::uint32_t>(2);
  w.value<std::uint64_t>(3);
  for (const int v : {1, 2, 65535}) w.value(static_cast<std::uint16_t>(v));
  for (const auto& t : tensors) w.tensor(t.name, t.dims, t.type);
  return w.bytes;
}

std::string gguf_error(const std::vector<unsigned char>& bytes) {
  try {
    memest::parse_gguf_header(bytes, "x.gguf", bytes.size());
  } catch (const memest::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("gguf: a header written here reads back", "[serve][gguf]") {
  const auto bytes = gguf_test_file();
  const auto h = memest::parse_gguf_header(bytes, "x.gguf", bytes.size());
  CHECK(h.version == 3);
  CHECK(h.metadata.size() == 11);
  CHECK(h.metadata.at("general.architecture").text == "llama");
  CHECK(memest::gguf_unsigned(h, "llama.embedding_length") == 256u);
  CHECK(h.metadata.at("tokenizer.ggml.tokens").count == 1000);
  CHECK(h.metadata.at("tokenizer.ggml.tokens").texts.at(999) == "t999");
  CHECK(h.metadata.at("llama.rope.freq_base").float_value == 500000.0);
  CHECK(h.metadata.at("test.negative").signed_value == -7);
  CHECK(h.metadata.at("test.u16s").count == 3);
  CHECK(h.metadata.at("test.u16s").raw.size() == 6);
  const auto expected = gguf_test_tensors();
  REQUIRE(h.tensors.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO(expected[i].name);
    CHECK(h.tensors[i].name == expected[i].name);
    CHECK(h.tensors[i].type == expected[i].type);
    CHECK(h.tensors[i].bytes == expected[i].bytes);
  }
  CHECK(h.tensors[0].type_name == "q4_K");
  CHECK(h.tensors[3].type_name == "q6_K");
}

TEST_CASE("gguf: ik_llama.cpp's own types read with their sizes", "[serve][gguf]") {
  // iq3_k (id 138): 110 bytes a block of 256; iq6_k (141): 212. One tensor each, no metadata.
  GgufWriter w;
  w.bytes = {'G', 'G', 'U', 'F'};
  w.value<std::uint32_t>(3);
  w.value<std::uint64_t>(2);
  w.value<std::uint64_t>(0);
  w.tensor("blk.0.ffn_up_exps.weight", {512, 4, 8}, 138);
  w.tensor("blk.0.attn_q.weight", {256, 256}, 141);
  const auto h = memest::parse_gguf_header(w.bytes, "ik.gguf", w.bytes.size());
  REQUIRE(h.tensors.size() == 2);
  CHECK(h.tensors[0].type_name == "iq3_k");
  CHECK(h.tensors[0].bytes == 2 * 4 * 8 * 110);
  CHECK(h.tensors[1].type_name == "iq6_k");
  CHECK(h.tensors[1].bytes == 256 * 212);
}

TEST_CASE("gguf: memest serve --gguf sizes the weights from the tensors", "[serve][gguf]") {
  memest::test::TempDir dir("gguf");
  const std::string path = (dir.path / "m.gguf").string();
  const auto bytes = gguf_test_file();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::uint64_t all = 0, layer1 = 0, embd = 0;
  for (const auto& t : gguf_test_tensors()) {
    all += t.bytes;
    if (t.name.starts_with("blk.1.")) layer1 += t.bytes;
    if (t.name == "token_embd.weight") embd = t.bytes;
  }
  const auto j = memest::test::run_json(
      {"serve", "--engine", "llama.cpp", "--gguf", path, "--ctx-size", "1024"});
  CHECK(j["weights"]["bytes"] == all - embd);  // token_embd stays in host memory
  // Two layers, two KV heads of 256 / 4 = 64: K and V of 128 f16 per layer and cell.
  CHECK(j["kv_cache"]["bytes"] == 1024u * 2 * 2 * 128 * 2);
  const auto one = memest::test::run_json({"serve", "--engine", "llama.cpp", "--gguf", path,
                                           "--ctx-size", "1024", "--n-gpu-layers", "1"});
  CHECK(one["weights"]["bytes"] == layer1);
  // --fit: the file's own weights in every row (one per KV-cache type), each answer within the
  // device and one more cell block past it.
  const auto fit = memest::test::run_json({"serve", "--engine", "llama.cpp", "--gguf", path,
                                           "--fit", "context", "--gpu-memory", "3MiB"});
  REQUIRE(fit["rows"].size() == 3);
  for (const auto& row : fit["rows"]) {
    CHECK(row["weights"] == "m.gguf");
    REQUIRE(row["best"].is_number());
    CHECK(row["at_best"]["weights"]["bytes"] == all - embd);
    CHECK(row["at_best"]["need_bytes"] <= 3u << 20);
    if (row["best"] < fit["limit"]) CHECK(row["past_best"]["need_bytes"] > 3u << 20);
  }
  const auto vllm = memest::test::run_cli({"serve", "--gguf", path, "--model", "llama-3-8b"});
  CHECK(vllm.code == 2);
  CHECK(vllm.err == "memest: error: --gguf: a llama.cpp flag, not used by --engine vllm\n");
  // Cut inside the last tensor's type: the reader names the tensor, the offset and the end.
  const auto cut = dir.path / "cut.gguf";
  const std::size_t end = bytes.size() - 10;
  std::ofstream(cut, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(end));
  const auto r = memest::test::run_cli({"serve", "--engine", "llama.cpp", "--gguf", cut.string()});
  CHECK(r.code == 2);
  CHECK(r.err == "memest: error: " + cut.string() + ": offset " + std::to_string(end - 2) +
                     ": expected the ggml type of tensor \"output.weight\" (4 bytes), the file "
                     "ends at " +
                     std::to_string(end) + " (truncated)\n");
}

TEST_CASE("gguf: more layers than llama.cpp loads is one line", "[serve][gguf]") {
  // The fuzzer's case: 370 million layers, which the layer split would walk one by one.
  memest::test::TempDir dir("gguf");
  const std::string path = (dir.path / "deep.gguf").string();
  const auto bytes = gguf_test_file(370'000'001);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const auto r = memest::test::run_cli({"serve", "--engine", "llama.cpp", "--gguf", path});
  CHECK(r.code == 2);
  CHECK(r.err == "memest: error: --engine llama.cpp: " + path +
                     " has 370000001 layers; llama.cpp loads at most 512 (LLAMA_MAX_LAYERS)\n");
}

TEST_CASE("gguf: a file cut at any byte is one line naming the offset", "[serve][gguf]") {
  const auto bytes = gguf_test_file();
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::vector<unsigned char> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    const std::string e = gguf_error(cut);
    INFO(n << ": " << e);
    REQUIRE(e.starts_with("x.gguf: offset "));
    REQUIRE(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("gguf: not GGUF, another version, hostile counts", "[serve][gguf]") {
  const auto good = gguf_test_file();
  auto bad = good;
  bad[3] = 'G';
  CHECK(gguf_error(bad) == "x.gguf: offset 0: expected the magic \"GGUF\"");
  bad = good;
  bad[4] = 1;
  CHECK(gguf_error(bad) == "x.gguf: offset 4: expected GGUF version 2 or 3, got 1");
  bad = good;
  bad[15] = 0x80;  // 2^63 tensors
  CHECK(gguf_error(bad).starts_with("x.gguf: offset 8: expected a tensor count that fits"));
  bad = good;
  std::fill(bad.begin() + 16, bad.begin() + 24, 0xff);  // 2^64 - 1 pairs
  CHECK(gguf_error(bad).starts_with("x.gguf: offset 16: expected a metadata count that fits"));
  bad = good;
  bad[31] = 0x7f;  // the first key's length
  CHECK(gguf_error(bad).starts_with("x.gguf: offset 24: expected the length of the key"));
  GgufWriter w;
  w.bytes = {'G', 'G', 'U', 'F'};
  w.value<std::uint32_t>(2);
  w.value<std::uint64_t>(1);
  w.value<std::uint64_t>(1);
  w.key("a", 9);
  w.value<std::uint32_t>(9);  // an array of arrays
  CHECK(gguf_error(w.bytes).find("got an array of arrays") != std::string::npos);
  w.bytes.resize(w.bytes.size() - 4);
  w.value<std::uint32_t>(10);
  w.value<std::uint64_t>(1ULL << 61);  // 2^61 u64s
  CHECK(gguf_error(w.bytes).find("expected an array length for \"a\" that fits") !=
        std::string::npos);
  GgufWriter k;  // a key with a newline and a bad type: the message stays one line
  k.bytes = w.bytes;
  k.bytes.resize(24);
  k.key("a\nb", 13);
  CHECK(gguf_error(k.bytes) ==
        "x.gguf: offset 35: expected a GGUF value type (0-12) for \"a\\x0ab\", got 13");
  GgufWriter t;
  t.bytes = {'G', 'G', 'U', 'F'};
  t.value<std::uint32_t>(3);
  t.value<std::uint64_t>(1);
  t.value<std::uint64_t>(0);
  t.tensor("w", {256, 1LL << 40, 1LL << 40}, kGgufQ4K);
  CHECK(gguf_error(t.bytes).find("expected a tensor size below 2^64 bytes") != std::string::npos);
  t.bytes.resize(24);
  t.tensor("w", {100}, kGgufQ4K);
  CHECK(gguf_error(t.bytes).find("whole 256-element blocks") != std::string::npos);
  t.bytes.resize(24);
  t.tensor("w", {256}, 4);  // a retired ggml type
  CHECK(gguf_error(t.bytes).find("expected a ggml type for tensor \"w\", got 4") !=
        std::string::npos);
}
