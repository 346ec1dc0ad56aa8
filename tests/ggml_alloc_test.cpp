// ggml's measuring allocator (src/serve/ggml_alloc.cpp), worked by hand: where each tensor goes
// under best fit among the inner free blocks, when the unbounded end is used, and how freed
// ranges merge.
#include "serve/ggml_alloc.hpp"

#include <catch2/catch.hpp>

#include <stdexcept>

using memest::GgmlDynAllocator;

TEST_CASE("sizes are rounded up to the alignment and stack from offset 0") {
  GgmlDynAllocator a(32);
  CHECK(a.alloc(124) == 0);  // 128 bytes
  CHECK(a.alloc(32) == 128);
  CHECK(a.alloc(1) == 160);
  CHECK(a.max_size() == 192);
  CHECK_THROWS_AS(GgmlDynAllocator(24), std::logic_error);
}

TEST_CASE("a tensor takes the smallest inner free block that holds it") {
  GgmlDynAllocator a(1);
  const auto x = a.alloc(100);  // [0, 100)
  a.alloc(10);                  // [100, 110): keeps the holes apart
  const auto y = a.alloc(40);   // [110, 150)
  a.alloc(10);                  // [150, 160)
  a.free(x, 100);
  a.free(y, 40);
  CHECK(a.alloc(30) == 110);  // the 40-byte hole, not the 100-byte one
  CHECK(a.alloc(60) == 0);    // only the 100-byte hole holds it
  CHECK(a.max_size() == 160);
}

TEST_CASE("the end of the buffer is the last resort, and the buffer grows there") {
  GgmlDynAllocator a(1);
  const auto x = a.alloc(64);  // [0, 64)
  a.alloc(8);                  // [64, 72)
  a.free(x, 64);
  CHECK(a.alloc(100) == 72);  // the hole of 64 does not hold it
  CHECK(a.max_size() == 172);
  CHECK(a.alloc(64) == 0);  // the hole fits exactly and is used up
  CHECK(a.max_size() == 172);
}

TEST_CASE("freed neighbours merge into one block") {
  GgmlDynAllocator a(1);
  const auto x = a.alloc(30);  // [0, 30)
  const auto y = a.alloc(30);  // [30, 60)
  const auto z = a.alloc(30);  // [60, 90)
  a.alloc(10);                 // [90, 100)
  a.free(x, 30);
  a.free(z, 30);
  a.free(y, 30);            // joins [0, 30) and [60, 90)
  CHECK(a.alloc(90) == 0);  // one block of 90 now
  CHECK(a.max_size() == 100);
  a.free(0, 90);
  a.free(90, 10);            // merges with the end block
  CHECK(a.alloc(150) == 0);  // everything is one free range again
  CHECK(a.max_size() == 150);
}
