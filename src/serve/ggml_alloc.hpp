#pragma once
// Private to src/serve: ggml's measuring allocator, ggml_dyn_tallocr (ggml/src/ggml-alloc.c of
// ikawrakow/ik_llama.cpp at 1843ed22, as mainline's), which sizes a compute buffer from the
// allocations and frees of one graph in order (src/serve/ggml_alloc.cpp).

#include <cstdint>
#include <vector>

namespace memest {

/// Offsets handed out and taken back as ggml_gallocr_alloc_graph does over a graph: sizes rounded
/// up to the buffer's alignment; a tensor goes to the smallest free block that holds it among the
/// blocks before the last (on a tie, the later one), and to the last block (the unbounded end)
/// only when none does; a freed range merges with the free blocks it touches. The buffer is as
/// large as the highest end any allocation reached (max_size).
class GgmlDynAllocator {
 public:
  explicit GgmlDynAllocator(std::uint64_t alignment);
  /// The offset of a new tensor of `size` bytes.
  std::uint64_t alloc(std::uint64_t size);
  /// Takes back the tensor of `size` bytes at `offset`.
  void free(std::uint64_t offset, std::uint64_t size);
  /// The bytes the buffer needs: the highest end reached.
  std::uint64_t max_size() const { return max_size_; }

 private:
  struct Block {
    std::uint64_t offset, size;
  };
  std::uint64_t aligned(std::uint64_t size) const;
  std::uint64_t alignment_;
  std::vector<Block> free_;  // by offset; the last one runs to the end of the address space
  std::uint64_t max_size_ = 0;
};

}  // namespace memest
