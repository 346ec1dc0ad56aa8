#pragma once

#include <memest/allocator_replay.hpp>
#include <memest/hardware.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/precision.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace memest {

/// How attention is computed: eager keeps the s x s scores; sdpa/flash keep the output and a
/// log-sum-exp per row.
enum class Attention { eager, sdpa, flash };
/// Activation recomputation: none; selective (attention core recomputed, Korthikanti et al.
/// 2022); full (each layer keeps only its input and is recomputed in backward).
enum class Recompute { none, selective, full };
/// Whose kernels decide what is saved and what scratch is live: CUDA (the default: what GPU
/// training runs) or the CPU (as in the reference measurements: CPU autocast casts fewer ops,
/// LayerNorm keeps its statistics in the input dtype).
enum class Device { cuda, cpu };
/// Allocation model: none counts requested bytes (torch.cuda.max_memory_allocated); cuda rounds
/// each block as the CUDA caching allocator does and reports reserved bytes as well.
enum class Allocator { none, cuda };
/// The loss over the vocabulary: hf keeps log_softmax(logits.float()) and frees two fp32 N x V
/// gradients at the start of backward (transformers' ForCausalLMLoss); vocab-parallel is
/// Megatron-LM's cross-entropy (tensor_parallel/cross_entropy.py): the fp32 logits turned into
/// the softmax in place and saved, the gradient written over it and cast to the logits' dtype.
enum class Loss { hf, vocab_parallel };

std::span<const std::string_view> attention_names();
Attention parse_attention(std::string_view text);
std::string_view attention_name(Attention a);
std::span<const std::string_view> recompute_names();
Recompute parse_recompute(std::string_view text);
std::string_view recompute_name(Recompute r);
std::span<const std::string_view> device_names();
Device parse_device(std::string_view text);
std::string_view device_name(Device d);
std::span<const std::string_view> allocator_names();
Allocator parse_allocator(std::string_view text);
std::string_view allocator_name(Allocator a);
std::span<const std::string_view> loss_names();
Loss parse_loss(std::string_view text);
std::string_view loss_name(Loss l);

/// The training loop around the model.
struct TrainingSpec {
  std::uint64_t micro_batch = 0;          ///< sequences per forward pass; 0 = not given
  std::uint64_t seq_len = 0;              ///< tokens per sequence; 0 = not given
  std::uint64_t grad_accum = 1;           ///< micro-batches per optimizer step
  Attention attention = Attention::sdpa;  ///< PyTorch 2 and transformers default
  Recompute recompute = Recompute::none;
  std::optional<double> dropout;  ///< overrides every dropout probability of the config
  bool grads_set_to_none = true;  ///< zero_grad(set_to_none=True): no grads between steps
  Device device = Device::cuda;
  Allocator allocator = Allocator::none;
  std::uint64_t context_reserve = 0;  ///< a stated constant for the CUDA context, added to the peak
  /// PyTorch's cuBLAS workspace, allocated through the caching allocator by the first matmul
  /// (kCublasWorkspace, or kCublasWorkspaceSm90 on Hopper; 0 on the CPU).
  std::uint64_t cublas_workspace = kCublasWorkspace;
  /// Model loading materialises the whole model on each device before sharding it (--load-full).
  bool load_full = false;
  Loss loss = Loss::hf;

  bool operator==(const TrainingSpec&) const = default;
};

/// Everything an estimate depends on. Plain values: loading and validation happen before.
struct RunSpec {
  ModelSpec model;
  PrecisionPolicy precision;
  OptimizerSpec optimizer;
  TrainingSpec training;
  ParallelSpec parallel;  ///< data parallelism and ZeRO sharding
  /// The device this spec describes when the model is split (src/layout.cpp): `model` is then
  /// that device's share. Default: one device holds the whole model.
  RankSpec rank;
  std::optional<Budget> budget;  ///< the device memory to check against, when given
};

}  // namespace memest
