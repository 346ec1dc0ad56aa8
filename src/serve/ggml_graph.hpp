#pragma once
// Private to src/serve: a ggml compute graph as the scheduler and the graph allocator see it
// (src/serve/ggml_graph.cpp): tensors with their sizes, sources and views, put in order as
// ggml_build_forward_expand puts them, cut into splits by device with the copies the scheduler
// makes, and replayed through ggml_gallocr to size one device's compute buffer.

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace memest {

/// ggml_backend_cuda_buffer_type_get_alignment: a CUDA compute buffer's tensors start at
/// multiples of 128 bytes.
inline constexpr std::uint64_t kCudaBufferAlignment = 128;

/// GGML_CUDA_MIN_BATCH_OFFLOAD: the rows (tokens) from which ggml_backend_cuda_offload_op lets a
/// GPU take over an op whose weight is in host memory.
inline constexpr std::uint64_t kCudaMinBatchOffload = 32;

/// The bytes of a tensor of the given sizes (elements times element bytes), refused with Error
/// on overflow.
std::uint64_t ggml_bytes(std::initializer_list<std::uint64_t> sizes);

/// The graph of one evaluation. Tensors are ids into the graph; a device is an index (the
/// host, llama.cpp's CPU backend, is kLlamaHost). Read from ggml/src/ggml.c (ggml_visit_parents),
/// ggml/src/ggml-backend.c (ggml_backend_sched_split_graph) and ggml/src/ggml-alloc.c
/// (ggml_gallocr_alloc_graph_impl) of ikawrakow/ik_llama.cpp at 1843ed22.
class GgmlGraph {
 public:
  using Id = std::uint32_t;
  /// Whether ggml_gallocr may put an op's result in a source's bytes (ggml_op_can_inplace: add,
  /// mul, scale, rms_norm, rope, soft_max, unary ops, ...).
  enum class Reuse : std::uint8_t { never, in_place };

  /// A tensor in no compute buffer: a weight, a view of the KV cache.
  Id external();
  /// A weight of `bytes` in `device`'s weight buffer (kLlamaHost: host memory). An op on another
  /// device reads a copy the scheduler makes in that device's compute buffer, and such a read
  /// starts a new split where the split has copies already (ggml_backend_sched_split_graph: "by
  /// starting a new split, the memory of the previously offloaded weights can be reused").
  Id weight(int device, std::uint64_t bytes);
  /// A graph input (ggml_set_input), which the scheduler keeps on the host, of `bytes`.
  Id input(std::uint64_t bytes);
  /// An op's result of `bytes` on `device`, reading `srcs` in order.
  Id op(int device, std::uint64_t bytes, std::initializer_list<Id> srcs,
        Reuse reuse = Reuse::never);
  /// A view of `of` (ggml_view_*, reshape, permute): the bytes of `of`'s root, `bytes` of them
  /// seen (what a copy of the view to another device takes).
  Id view(Id of, std::uint64_t bytes);
  /// An op that writes into `dest`, a tensor in no compute buffer (ggml_cpy into the KV cache):
  /// a view of `dest` reading `src` and `dest`.
  Id write(Id src, Id dest);
  /// A graph output (ggml_set_output): never freed.
  void output(Id t);
  /// ggml_build_forward_expand: `t` after the tensors it reads (first source first), each once.
  void expand(Id t);
  /// The high-water mark of each GPU's buffer (devices 0 to `devices` - 1): ggml_dyn_tallocr over
  /// the graph's nodes with the scheduler's split copies, each tensor allocated when its node
  /// runs (in a source's bytes where it may and that source has no other reader and no view),
  /// freed after its last reader; under pipeline parallelism (`n_copies` > 1) the split copies
  /// n_copies times over, allocated first and never freed. The graph's inputs are the host's
  /// (not sized here: ggml allocates them before the nodes).
  std::vector<std::uint64_t> buffers(std::size_t devices, std::uint64_t alignment,
                                     std::uint64_t n_copies = 1) const;
  /// The nodes expanded so far.
  std::size_t nodes() const { return order_.size(); }

 private:
  struct Tensor {
    std::uint64_t bytes = 0;
    std::uint32_t first_src = 0;  // its sources: srcs_[first_src, first_src + srcs)
    std::uint32_t srcs = 0;
    Id root = 0;  // itself unless a view
    int device = 0;
    bool external = false;
    bool view = false;
    bool leaf = false;  // an input or external tensor: no op
    bool in_place = false;
    bool output = false;
    bool weight = false;  // a weight with a device: copied to the devices of its readers
  };
  struct Plan;  // the nodes with the split copies, as the allocator replays them
  Plan plan(std::uint64_t n_copies) const;
  int device_of(Id t) const { return tensors_[tensors_[t].root].device; }
  bool foreign(Id src, int dev) const;
  bool reads_foreign_weight(const Tensor& x, int dev) const;
  Id add(Tensor t, std::initializer_list<Id> srcs = {});
  std::vector<Tensor> tensors_;
  std::vector<Id> srcs_;
  std::vector<Id> order_;
  std::vector<bool> visited_;
};

}  // namespace memest
