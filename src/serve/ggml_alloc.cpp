// ggml_dyn_tallocr_alloc and ggml_dyn_tallocr_free_tensor (ggml/src/ggml-alloc.c of
// ikawrakow/ik_llama.cpp at 1843ed22): best fit among the free blocks but the last, merging on
// free.
#include "serve/ggml_alloc.hpp"

#include <memest/units.hpp>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

namespace memest {

GgmlDynAllocator::GgmlDynAllocator(std::uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw std::logic_error("GgmlDynAllocator: the alignment is not a power of two");
  free_.push_back({0, UINT64_MAX / 2});  // ggml_dyn_tallocr_reset: SIZE_MAX / 2
}

std::uint64_t GgmlDynAllocator::aligned(std::uint64_t size) const {
  return checked_mul(ceil_div(size, alignment_), alignment_);
}

std::uint64_t GgmlDynAllocator::alloc(std::uint64_t size) {
  size = aligned(size);
  std::size_t best = free_.size() - 1;  // the last block, the last resort
  std::uint64_t best_size = UINT64_MAX;
  for (std::size_t i = 0; i + 1 < free_.size(); ++i) {
    if (free_[i].size >= size && free_[i].size <= best_size) {
      best = i;
      best_size = free_[i].size;
    }
  }
  Block& b = free_[best];
  if (b.size < size) throw_size_overflow();  // past half the address space, as ggml aborts
  const std::uint64_t offset = b.offset;
  b.offset += size;
  b.size -= size;
  if (b.size == 0) free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
  max_size_ = std::max(max_size_, checked_add(offset, size));
  return offset;
}

void GgmlDynAllocator::free(std::uint64_t offset, std::uint64_t size) {
  size = aligned(size);
  for (std::size_t i = 0; i < free_.size(); ++i) {
    Block& b = free_[i];
    if (b.offset + b.size == offset) {  // the range ends this block
      b.size += size;
      if (i + 1 < free_.size() && b.offset + b.size == free_[i + 1].offset) {
        b.size += free_[i + 1].size;
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i + 1));
      }
      return;
    }
    if (offset + size == b.offset) {  // the range starts this block
      b.offset = offset;
      b.size += size;
      if (i > 0 && free_[i - 1].offset + free_[i - 1].size == b.offset) {
        free_[i - 1].size += b.size;
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return;
    }
  }
  std::size_t at = 0;
  while (at < free_.size() && free_[at].offset < offset) ++at;
  free_.insert(free_.begin() + static_cast<std::ptrdiff_t>(at), Block{offset, size});
}

}  // namespace memest
