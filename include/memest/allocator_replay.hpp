#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

namespace memest {

// The constants of PyTorch's CUDA caching allocator, c10/cuda/CUDACachingAllocator.cpp
// (pytorch/pytorch, read at commit 001074d25084fdb87a799823e395a50f5ec044d3).
inline constexpr std::uint64_t kMinBlockSize = 512;           ///< every size rounds to 512 B
inline constexpr std::uint64_t kSmallSize = 1ULL << 20;       ///< largest small-pool request
inline constexpr std::uint64_t kSmallBuffer = 2ULL << 20;     ///< small-pool segment
inline constexpr std::uint64_t kMinLargeAlloc = 10ULL << 20;  ///< below it a 20 MiB segment
inline constexpr std::uint64_t kLargeBuffer = 20ULL << 20;    ///< large-pool shared segment
inline constexpr std::uint64_t kRoundLarge = 2ULL << 20;      ///< larger segments round to it

/// PyTorch's cuBLAS workspace per handle and stream when CUBLAS_WORKSPACE_CONFIG is unset:
/// ":4096:2:16:8" (2 x 4096 KiB + 8 x 16 KiB), and ":4096:8" (8 x 4096 KiB) on sm90; allocated
/// through the caching allocator (aten/src/ATen/cuda/CublasHandlePool.cpp,
/// parseChosenWorkspaceSize and getNewWorkspace).
inline constexpr std::uint64_t kCublasWorkspace = 4096ULL * 1024 * 2 + 16ULL * 1024 * 8;
inline constexpr std::uint64_t kCublasWorkspaceSm90 = 4096ULL * 1024 * 8;
/// The workspace of one handle on a device of compute capability `sm` x 10.
constexpr std::uint64_t cublas_workspace_for(std::uint32_t sm) {
  return sm == 90 ? kCublasWorkspaceSm90 : kCublasWorkspace;
}
/// The threads of a training step that run cuBLAS, each with a handle and so a workspace of its
/// own: the caller's (the forward) and autograd's device thread (the backward).
inline constexpr std::uint64_t kCublasThreads = 2;
/// Transformer Engine's own cuBLAS workspace, one per device, a torch.empty at its first GEMM
/// (transformer_engine/pytorch/cpp_extensions/gemm.py, get_cublas_workspace_size_bytes and
/// get_cublas_workspace, read at d0067d0da): 4 MiB, and 32 MiB + 1 KiB from sm90 on.
inline constexpr std::uint64_t kTeWorkspace = 4'194'304;
inline constexpr std::uint64_t kTeWorkspaceSm90 = 32ULL * 1024 * 1024 + 1024;

/// The block size of a request: at least 512 B, a multiple of 512 B (round_size).
std::uint64_t caching_round_size(std::uint64_t bytes);
/// The segment cudaMalloc'd for a request of rounded `size` when no cached block fits:
/// 2 MiB up to 1 MiB, 20 MiB below 10 MiB, else `size` rounded up to 2 MiB
/// (get_allocation_size).
std::uint64_t caching_segment_size(std::uint64_t size);

/// An instant of the replayed run: its stretch ("set-up" for model loading, "first step",
/// "steady state") and the moment of the walk ("forward_end", "parameters loaded", ...).
struct RunInstant {
  std::string_view stretch;
  std::string_view moment;
};

/// --allocator cuda: PyTorch's caching allocator replayed over model loading and two training
/// steps (src/replay/allocator_step.cpp), per device; the torch.cuda statistics it stands for.
struct AllocatorReplay {
  std::uint64_t allocated = 0;  ///< max_memory_allocated: blocks as the allocator sized them
  RunInstant allocated_at;
  std::uint64_t reserved = 0;  ///< max_memory_reserved: the segments, cached once allocated
  RunInstant reserved_at;
  std::uint64_t setup_reserved = 0;  ///< reserved when model loading is done
  std::uint64_t segments = 0;        ///< cudaMalloc calls over the run
  /// Under a budget: cached segments freed when cudaMalloc failed, and requests that did not
  /// fit even then (the run is out of memory; reserved then says by how much).
  std::uint64_t released_segments = 0;
  std::uint64_t out_of_memory = 0;
  std::uint64_t cublas_workspace = 0;  ///< both threads' workspaces, through the allocator
  std::uint64_t te_workspace = 0;      ///< Transformer Engine's, at its first GEMM
};

/// A replay of PyTorch's CUDA caching allocator (DeviceCachingAllocator in
/// c10/cuda/CUDACachingAllocator.cpp), without expandable segments, garbage collection or
/// empty_cache().
/// malloc takes the best-fitting cached free block of its pool (smallest size, then lowest
/// address: BlockComparatorSize), splits it when should_split() says so (small pool: a
/// remainder of at least 512 B; large pool: a request under max_split_size and a remainder
/// over 1 MiB), or cudaMallocs a new segment of caching_segment_size(); free returns the block
/// to its pool and merges it with free neighbours of its segment (try_merge_blocks). Each
/// segment belongs to the stream that allocated it: a cached block serves only a request on
/// the same stream (BlockComparatorSize orders the pools by stream first).
/// The device holds `device_capacity` bytes for segments (unbounded by default): a new segment
/// that would pass it fails in cudaMalloc, and the allocator then frees every cached block that
/// is a whole segment (release_cached_blocks, release_blocks: blocks with no prev and no next)
/// and tries once more; a request that still does not fit is out of memory, counted, and
/// replayed as if the device were larger, so that the figures say by how much.
struct AllocatorLimits {
  /// max_split_size (PYTORCH_CUDA_ALLOC_CONF max_split_size_mb); the default is unlimited.
  std::uint64_t max_split_size = std::numeric_limits<std::uint64_t>::max();
  /// What cudaMalloc can hand out: the device's memory less the context; unlimited by default.
  std::uint64_t device_capacity = std::numeric_limits<std::uint64_t>::max();
};

class CachingAllocator {
 public:
  using Handle = std::uint32_t;
  explicit CachingAllocator(AllocatorLimits limits = {});

  /// Allocates `bytes` on `stream` (0 allocates nothing and returns kNone).
  Handle malloc(std::uint64_t bytes, std::uint8_t stream = 0);
  /// Frees a block malloc returned (kNone is ignored).
  void free(Handle h);

  static constexpr Handle kNone = std::numeric_limits<Handle>::max();

  std::uint64_t allocated() const { return allocated_; }        ///< memory_allocated()
  std::uint64_t reserved() const { return reserved_; }          ///< memory_reserved()
  std::uint64_t max_reserved() const { return max_reserved_; }  ///< max_memory_reserved()
  std::uint64_t segments() const { return segments_; }          ///< cudaMalloc calls
  /// Cached segments freed by the retry after a failed cudaMalloc (num_alloc_retries frees).
  std::uint64_t released_segments() const { return released_; }
  /// Requests that did not fit the device even after that retry (num_ooms).
  std::uint64_t out_of_memory() const { return ooms_; }
  /// The size of a block malloc returned (its rounded, possibly unsplit size).
  std::uint64_t block_size(Handle h) const { return blocks_[h].size; }

 private:
  struct Block {
    std::uint64_t ptr = 0, size = 0;
    Handle prev = kNone, next = kNone;
    bool allocated = false, small = false;
    std::uint8_t stream = 0;
  };
  // stream, size, ptr
  using FreeSet = std::set<std::tuple<std::uint8_t, std::uint64_t, std::uint64_t, Handle>>;

  Handle new_block(const Block& b);
  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }
  Handle take_free_block(std::uint64_t size, bool small, std::uint8_t stream);
  Handle new_segment(std::uint64_t size, bool small, std::uint8_t stream);
  void cache(Handle h);
  void split(Handle h, std::uint64_t size);
  void merge(Handle dst, Handle src);
  void release_cached_segments();
  static bool whole(const Block& b) { return b.prev == kNone && b.next == kNone; }

  AllocatorLimits limits_;
  std::vector<Block> blocks_;
  std::vector<Handle> spare_;  // slots of merged-away blocks, reused
  FreeSet small_free_, large_free_;
  std::uint64_t next_ptr_ = 1ULL << 32;
  std::uint64_t allocated_ = 0, reserved_ = 0, max_reserved_ = 0, segments_ = 0;
  std::uint64_t released_ = 0, ooms_ = 0;
  std::uint64_t whole_free_ = 0;  // cached blocks that are whole segments
};

}  // namespace memest
