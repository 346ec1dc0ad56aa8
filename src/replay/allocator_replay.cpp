// PyTorch's CUDA caching allocator, replayed: best fit, splitting, merging, segments that stay
// cached (c10/cuda/CUDACachingAllocator.cpp; docs/activations.md, "Allocator and context").
#include <memest/allocator_replay.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <stdexcept>

namespace memest {
namespace {

u64 round_up(u64 x, u64 m) { return checked_mul(ceil_div(x, m), m); }

}  // namespace

u64 caching_round_size(u64 bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

u64 caching_segment_size(u64 size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

CachingAllocator::CachingAllocator(AllocatorLimits limits) : limits_(limits) {}

CachingAllocator::Handle CachingAllocator::new_block(const Block& b) {
  if (!spare_.empty()) {
    const Handle h = spare_.back();
    spare_.pop_back();
    blocks_[h] = b;
    return h;
  }
  blocks_.push_back(b);
  return static_cast<Handle>(blocks_.size() - 1);
}

// A free block back in its pool.
void CachingAllocator::cache(Handle h) {
  const Block& b = blocks_[h];
  pool(b.small).insert({b.stream, b.size, b.ptr, h});
  if (whole(b)) ++whole_free_;
}

// get_free_block: the smallest cached block of the stream's pool that holds `size` (ties: the
// lowest address); an oversize block (>= max_split_size) serves only a request within 20 MiB.
CachingAllocator::Handle CachingAllocator::take_free_block(u64 size, bool small,
                                                           std::uint8_t stream) {
  FreeSet& p = pool(small);
  const auto it = p.lower_bound({stream, size, 0, 0});
  if (it == p.end() || std::get<0>(*it) != stream) return kNone;
  const u64 found = std::get<1>(*it);
  const u64 max_split = limits_.max_split_size;
  if (size < max_split && found >= max_split) return kNone;
  if (size >= max_split && found >= size + kLargeBuffer) return kNone;
  const Handle h = std::get<3>(*it);
  p.erase(it);
  if (whole(blocks_[h])) --whole_free_;
  return h;
}

// release_cached_blocks: every cached free block that is a whole segment (no neighbour in it)
// goes back to the device; blocks of split segments stay.
void CachingAllocator::release_cached_segments() {
  if (whole_free_ == 0) return;
  whole_free_ = 0;
  for (FreeSet* p : {&small_free_, &large_free_}) {
    for (auto it = p->begin(); it != p->end();) {
      const Handle h = std::get<3>(*it);
      if (!whole(blocks_[h])) {
        ++it;
        continue;
      }
      reserved_ -= blocks_[h].size;
      ++released_;
      spare_.push_back(h);
      it = p->erase(it);
    }
  }
}

// alloc_block: a new segment from cudaMalloc, held until empty_cache(); when cudaMalloc fails,
// the cached whole segments are released and it is tried once more (DeviceCachingAllocator::
// malloc).
CachingAllocator::Handle CachingAllocator::new_segment(u64 size, bool small, std::uint8_t stream) {
  const u64 bytes = caching_segment_size(size);
  if (checked_add(reserved_, bytes) > limits_.device_capacity) {
    release_cached_segments();
    if (reserved_ + bytes > limits_.device_capacity) ++ooms_;
  }
  Block b;
  b.ptr = next_ptr_;
  b.size = bytes;
  b.small = small;
  b.stream = stream;
  next_ptr_ = checked_add(next_ptr_, bytes);
  reserved_ = checked_add(reserved_, bytes);
  max_reserved_ = std::max(max_reserved_, reserved_);
  ++segments_;
  return new_block(b);
}

// alloc_found_block: the front `size` bytes are handed out, the rest stays cached.
void CachingAllocator::split(Handle h, u64 size) {
  Block rest;
  rest.ptr = blocks_[h].ptr + size;
  rest.size = blocks_[h].size - size;
  rest.small = blocks_[h].small;
  rest.stream = blocks_[h].stream;
  rest.prev = h;
  rest.next = blocks_[h].next;
  const Handle r = new_block(rest);
  if (blocks_[r].next != kNone) blocks_[blocks_[r].next].prev = r;
  blocks_[h].next = r;
  blocks_[h].size = size;
  cache(r);
}

CachingAllocator::Handle CachingAllocator::malloc(u64 bytes, std::uint8_t stream) {
  if (bytes == 0) return kNone;
  const u64 size = caching_round_size(bytes);
  const bool small = size <= kSmallSize;
  Handle h = take_free_block(size, small, stream);
  if (h == kNone) h = new_segment(size, small, stream);
  const u64 remaining = blocks_[h].size - size;
  // should_split
  const bool split_it =
      small ? remaining >= kMinBlockSize : size < limits_.max_split_size && remaining > kSmallSize;
  if (split_it) split(h, size);
  blocks_[h].allocated = true;
  allocated_ = checked_add(allocated_, blocks_[h].size);
  return h;
}

// try_merge_blocks: `src`, a free neighbour of `dst` in its segment, is absorbed.
void CachingAllocator::merge(Handle dst, Handle src) {
  if (src == kNone || blocks_[src].allocated) return;
  Block& d = blocks_[dst];
  const Block s = blocks_[src];
  pool(s.small).erase({s.stream, s.size, s.ptr, src});
  if (d.prev == src) {
    d.ptr = s.ptr;
    d.prev = s.prev;
    if (d.prev != kNone) blocks_[d.prev].next = dst;
  } else {
    d.next = s.next;
    if (d.next != kNone) blocks_[d.next].prev = dst;
  }
  d.size += s.size;
  spare_.push_back(src);
}

void CachingAllocator::free(Handle h) {
  if (h == kNone) return;
  if (h >= blocks_.size() || !blocks_[h].allocated) {
    throw std::logic_error("caching allocator replay: a block freed twice");
  }
  Block& b = blocks_[h];
  b.allocated = false;
  allocated_ -= b.size;
  merge(h, blocks_[h].prev);
  merge(h, blocks_[h].next);
  cache(h);
}

}  // namespace memest
