// A ggml graph's order, split copies and allocator replay (src/serve/ggml_graph.cpp), on small
// graphs whose buffers are worked out by hand (alignment 1: sizes as given).
#include "serve/ggml_graph.hpp"

#include <catch2/catch.hpp>

using memest::GgmlGraph;
constexpr int kHost = -1;
constexpr auto kInPlace = GgmlGraph::Reuse::in_place;

TEST_CASE("an in-place op takes the bytes of a source it alone reads") {
  GgmlGraph g;
  const auto x = g.op(0, 64, {});
  g.expand(g.op(0, 64, {x}, kInPlace));
  CHECK(g.buffers(2, 1)[0] == 64);

  GgmlGraph plain;  // the same op not in place: both live at once
  const auto y = plain.op(0, 64, {});
  plain.expand(plain.op(0, 64, {y}));
  CHECK(plain.buffers(2, 1)[0] == 128);
}

TEST_CASE("a source with another reader, a view or other bytes is not taken in place") {
  GgmlGraph two_readers;
  const auto x = two_readers.op(0, 64, {});
  const auto y = two_readers.op(0, 64, {x}, kInPlace);
  two_readers.expand(two_readers.op(0, 64, {x, y}));
  CHECK(two_readers.buffers(2, 1)[0] == 192);  // x, y and the sum live together

  GgmlGraph viewed;  // x's view is read later: x is not reused
  const auto a = viewed.op(0, 64, {});
  const auto v = viewed.view(a, 64);
  const auto b = viewed.op(0, 64, {a}, kInPlace);
  viewed.expand(viewed.op(0, 8, {b, v}));
  CHECK(viewed.buffers(2, 1)[0] == 136);

  GgmlGraph wider;
  const auto s = wider.op(0, 32, {});
  wider.expand(wider.op(0, 64, {s}, kInPlace));
  CHECK(wider.buffers(2, 1)[0] == 96);
}

TEST_CASE("a view keeps its root until the view's last reader") {
  GgmlGraph g;
  const auto x = g.op(0, 64, {});
  const auto half = g.view(x, 32);
  const auto y = g.op(0, 32, {half});  // [64, 96); x is freed after it
  g.expand(g.op(0, 64, {y}));          // x's 64 bytes at 0 hold it
  CHECK(g.buffers(2, 1)[0] == 96);

  GgmlGraph late;  // the view read again at the end: the root stays to the end
  const auto r = late.op(0, 64, {});
  const auto v = late.view(r, 32);
  const auto z = late.op(0, 32, {v});  // [64, 96)
  // [96, 160) beside r and z; z freed; the last op in z's hole
  late.expand(late.op(0, 8, {late.op(0, 64, {z}), v}));
  CHECK(late.buffers(2, 1)[0] == 160);
}

// The order of ggml_build_forward_expand decides what lives together: tensors expanded one by
// one in a loop are made before a consumer that only the final expansion reaches.
TEST_CASE("tensors expanded in a loop all live until readers expanded after it") {
  GgmlGraph apart;  // each key read as soon as it is made
  GgmlGraph::Id out = 0;
  for (int i = 0; i < 4; ++i) {
    const auto key = apart.op(0, 100, {});
    const auto read = apart.op(0, 10, {key});
    out = i == 0 ? read : apart.op(0, 10, {out, read}, kInPlace);
    apart.expand(out);
  }
  // key 0 at [0, 100), its read at [100, 110), the key freed; each next key takes that hole,
  // its read the end [110, 120), the sum the first read's bytes in place: a key and two reads.
  CHECK(apart.buffers(2, 1)[0] == 120);

  GgmlGraph together;  // the keys expanded in the loop, the reads from the output
  std::vector<GgmlGraph::Id> keys;
  for (int i = 0; i < 4; ++i) {
    keys.push_back(together.op(0, 100, {}));
    together.expand(keys.back());
  }
  GgmlGraph::Id sum = 0;
  for (int i = 0; i < 4; ++i) {
    const auto read = together.op(0, 10, {keys[static_cast<std::size_t>(i)]});
    sum = i == 0 ? read : together.op(0, 10, {sum, read}, kInPlace);
  }
  together.expand(sum);
  CHECK(together.buffers(2, 1)[0] == 410);  // four keys, then the first read
}

TEST_CASE("a device reads another device's tensor through a copy made at its split's start") {
  GgmlGraph g;
  const auto x = g.op(0, 40, {});
  const auto h = g.op(kHost, 10, {x});  // the host's split: x's copy, then h
  g.expand(g.op(0, 40, {h}));           // device 0 again: h's copy, then the op
  // x is freed once the host's split has copied it (its dependency), so h's copy (10) and the op
  // (40) fit from 0: 50, not 90.
  CHECK(g.buffers(2, 1)[0] == 50);
  CHECK(g.buffers(2, 1)[1] == 0);  // a device with no tensor

  GgmlGraph twice;  // two readers on device 0 of one host tensor share one copy
  const auto src = twice.op(kHost, 30, {});
  const auto a = twice.op(0, 5, {src});
  twice.expand(twice.op(0, 5, {a, src}));
  CHECK(twice.buffers(2, 1)[0] == 40);
}

TEST_CASE("outputs are never freed and sizes are aligned") {
  GgmlGraph g;
  const auto x = g.op(0, 10, {});
  const auto out = g.op(0, 10, {x});
  g.output(out);
  g.expand(g.op(0, 10, {out}));
  CHECK(g.buffers(2, 1)[0] == 20);   // x's 10 bytes at 0 hold the last op
  CHECK(g.buffers(2, 32)[0] == 64);  // each takes 32: x and out, the last op in x's place
}

TEST_CASE("under pipeline parallelism the split copies are made n times, first, and kept") {
  GgmlGraph g;
  const auto h = g.op(kHost, 10, {});
  const auto on_device = g.op(0, 20, {h});  // reads h's copy on device 0
  g.expand(g.op(0, 10, {on_device}));
  // One copy: [0, 10), the op at [10, 30), the copy freed after its reader; the last op in its
  // hole. Three copies: [0, 30) kept, the ops at [30, 50) and [50, 60).
  CHECK(g.buffers(1, 1, 1)[0] == 30);
  CHECK(g.buffers(1, 1, 3)[0] == 60);
}

TEST_CASE("a weight in another device's buffer is copied at the start of a split of its own") {
  // x on device 0, then a = op(w1, x) and b = op(w2, a) with w1 (100 bytes) and w2 (50) in host
  // memory. w1's copy is the split's first input, made at its start, before x: [0, 100), x
  // [100, 110), a [110, 120); then w1's copy and x are freed. b reads a host weight while the
  // split has a copy: a new split, whose copy of w2 takes [0, 50) of the freed 110 bytes and b
  // the best-fitting rest, [50, 60): 120 bytes. Were w2 copied at the first split's start too,
  // both copies would live together: 100 + 50 + 10 + 10 = 170.
  GgmlGraph g;
  const auto x = g.op(0, 10, {});
  const auto w1 = g.weight(kHost, 100);
  const auto w2 = g.weight(kHost, 50);
  const auto a = g.op(0, 10, {w1, x});
  g.expand(g.op(0, 10, {w2, a}));
  CHECK(g.buffers(2, 1)[0] == 120);
  CHECK(g.buffers(2, 1)[1] == 0);
  // A weight in the reader's own buffer is not copied; one in another GPU's is.
  GgmlGraph own;
  own.expand(own.op(0, 10, {own.weight(0, 100), own.op(0, 10, {})}));
  CHECK(own.buffers(2, 1)[0] == 20);
  GgmlGraph other;
  other.expand(other.op(0, 10, {other.weight(1, 100), other.op(0, 10, {})}));
  CHECK(other.buffers(2, 1)[0] == 120);
}
