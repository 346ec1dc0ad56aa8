#pragma once

#include <memest/allocator_replay.hpp>
#include <memest/from_report.hpp>
#include <memest/hardware.hpp>
#include <memest/model.hpp>
#include <memest/optimizer.hpp>
#include <memest/parallel.hpp>
#include <memest/precision.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace memest {

/// How attention is computed: eager keeps the s x s scores; sdpa/flash keep the output and a
/// log-sum-exp per row.
enum class Attention { eager, sdpa, flash };
/// Activation recomputation: none; selective (attention core recomputed, Korthikanti et al.
/// 2022); full (each layer keeps only its input and is recomputed in backward); op (per-op
/// selective checkpointing as torchtitan's selective_ac_option "op": each layer keeps its input
/// and the outputs of every other matmul and of the attention kernel, docs/techniques.md).
enum class Recompute { none, selective, full, op };
/// Whether each layer runs under torch.utils.checkpoint (full or per-op): it keeps its input
/// (and under op its cached outputs) and is recomputed in backward.
inline bool checkpointed(Recompute r) { return r == Recompute::full || r == Recompute::op; }
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
/// the softmax in place and saved, the gradient written over it and cast to the logits' dtype;
/// chunked is torchtune's CEWithChunkedOutputLoss (the lm_head output in TrainingSpec::loss_chunk
/// chunks of the sequence, 8 by default, each upcast to fp32 on its own, the logits deleted before
/// backward); chunked-tokens is LitGPT's lm_head_chunk_size with chunked_cross_entropy (chunks of
/// loss_chunk positions, 128 by default, the log-softmax in the logits' dtype, the logits kept by
/// the training loop through backward); hf-upcast is transformers' causal LMs before 4.45
/// (LlamaForCausalLM.forward: `logits = logits.float()`, returned as the model's output, then
/// `logits[..., :-1, :].contiguous()` for the loss: an fp32 N x V output and an fp32 shifted
/// copy). docs/activations.md, "The loss".
enum class Loss { hf, vocab_parallel, chunked, chunked_tokens, hf_upcast };
/// Where QLoRA's base weights become NF4: none (they arrive quantised: nothing on the device
/// before the first step); whole (each weight built in 16 bits on the device as the model is
/// constructed and quantised at once: torchao 0.1's NF4Tensor.from_tensor, as torchtune's
/// LoRALinear calls to_nf4); chunked (the same, 2^20 elements at a time: torchao >= 0.2).
/// docs/techniques.md, "QLoRA quantised on the device".
enum class QloraInit { none, whole, chunked };
/// The layers' implementation, as Megatron-LM's --transformer-impl names it: local (PyTorch's
/// modules) or transformer_engine (Transformer Engine's, which keep a cuBLAS workspace of their
/// own: kTeWorkspace).
enum class TransformerImpl { local, transformer_engine };
/// Whose modelling code runs the model (--model-code): hf (transformers' modeling_*.py) or
/// litgpt (LitGPT's lit_gpt/model.py and lora.py, read at 8641822: RMSNorm in the model's
/// dtype, one fused qkv linear whose LoRA has one dropout, F.gelu; docs/activations.md).
enum class ModelCode { hf, litgpt };
/// How the model reaches the device before the first step (--model-loading; with --allocator
/// cuda, the set-up stretch of the replay): none (it arrives as stored: nothing on the device
/// before the model is loaded); layer-clones (built on the device as one decoder layer
/// deep-copied num_layers times, that layer then freed: torchtune's Llama-2 builders); nf4-whole
/// and nf4-chunked (QLoRA base weights built in 16 bits on the device and quantised there, as
/// QloraInit::whole and chunked say); layer-clones,nf4-whole and layer-clones,nf4-chunked (both:
/// torchtune's QLoRA Llama-2 builders, each copy quantised again); fsdp-sync (FSDP1's
/// constructor with sync_module_states=True on a model held on the host); full (the whole model
/// materialised on every device before it is sharded). docs/techniques.md, "Model loading".
enum class ModelLoading {
  none,
  layer_clones,
  nf4_whole,
  nf4_chunked,
  layer_clones_nf4_whole,
  layer_clones_nf4_chunked,
  fsdp_sync,
  full
};

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
std::span<const std::string_view> qlora_init_names();
QloraInit parse_qlora_init(std::string_view text);
std::span<const std::string_view> transformer_impl_names();
TransformerImpl parse_transformer_impl(std::string_view text);
std::span<const std::string_view> model_code_names();
ModelCode parse_model_code(std::string_view text);
std::span<const std::string_view> model_loading_names();
ModelLoading parse_model_loading(std::string_view text);
std::string_view model_loading_name(ModelLoading m);
/// How the QLoRA base weights are quantised on the device under `m` (none when they are not).
QloraInit nf4_init(ModelLoading m);
/// Whether `m` builds the model as copies of one decoder layer (torchtune's _get_clones).
bool clones_layers(ModelLoading m);

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
  /// Transformer Engine's cuBLAS workspace (--transformer-impl transformer_engine): kTeWorkspace,
  /// or kTeWorkspaceSm90 from sm90 on; 0 without TE layers.
  std::uint64_t te_workspace = 0;
  Loss loss = Loss::hf;
  /// chunked: chunks of the sequence (0: torchtune's 8); chunked-tokens: positions per chunk
  /// (0: LitGPT's 128).
  std::uint64_t loss_chunk = 0;
  /// The training loop holds the model's output (`output = model(...)`) from one forward to
  /// the next: its logits live through backward and the next step's forward (--loop-keeps-output).
  bool loop_keeps_output = false;
  /// The training loop gets the model's floating outputs cast to torch's default dtype, fp32
  /// (Lightning Fabric's _FabricModule.forward: precision.convert_output) (--output-fp32).
  bool output_fp32 = false;
  /// PyTorch before 1.11: softmax and log_softmax keep their input for backward besides their
  /// output (pytorch/pytorch#64000, fixed by #65242) (--softmax-keeps-input).
  bool softmax_keeps_input = false;
  /// transformers from 4.54 (--sdpa-enable-gqa): k and v reach SDPA unrepeated, and PyTorch's
  /// dispatcher picks the kernel (src/step/activation.cpp, sdpa_kernel).
  bool sdpa_enable_gqa = false;
  /// The --gpu preset has no flash-class attention kernel (before sm80).
  bool no_flash_kernel = false;
  /// Dropout on the LoRA branch's input (PEFT's lora_dropout; 0 is PEFT's and torchtune's
  /// default, LitGPT's finetune/lora.py uses 0.05, Answer.AI's fsdp_qlora 0.1).
  double lora_dropout = 0;
  /// The LoRA adapters' dtype when it is their own (--adapter-dtype: PEFT's fp32 upcast).
  std::optional<Dtype> adapter_dtype;
  /// bitsandbytes before 0.43.2: each 4-bit linear keeps its input for backward although it
  /// has no weight gradient (MatMul4Bit's ctx.tensors = (A, B), dropped in PR #1270).
  bool nf4_keeps_input = false;
  /// How the model reaches the device (--model-loading, or its older flags --qlora-init,
  /// --layer-clones, --fsdp-sync-module-states, --load-full); with --allocator cuda the set-up
  /// stretch of the replay.
  ModelLoading model_loading = ModelLoading::none;
  ModelCode model_code = ModelCode::hf;
  std::string stack;  ///< the training stack whose defaults the run took (--stack); empty: none
  /// The stack's defaults that a package version decided, one line each (the version, or that
  /// the newest was taken, and the source): the estimate's first assumptions.
  std::vector<std::string> stack_assumptions;
  /// The optimizer step fused into backward (torchtune optimizer_in_bwd, PyTorch's
  /// register_post_accumulate_grad_hook): each gradient is applied and freed as soon as it is
  /// accumulated; no gradient of the whole model exists (docs/techniques.md).
  bool optimizer_in_backward = false;
  /// Activation offloading (torchtune OffloadActivations): saved tensors of 1024 bytes or more
  /// are copied to pinned host memory in forward and brought back in backward.
  bool offload_activations = false;
  /// torch.compile of each layer: Inductor's partitioner recomputes pointwise results in
  /// backward instead of saving them (a stated approximation, docs/techniques.md).
  bool compile = false;

  bool operator==(const TrainingSpec&) const = default;
};

/// Everything an estimate depends on. Plain values: loading and validation happen before.
struct RunSpec {
  ModelSpec model;
  PrecisionPolicy precision;
  OptimizerSpec optimizer;
  TrainingSpec training;
  ParallelSpec parallel;  ///< data parallelism and ZeRO sharding
  /// The device this spec describes when the model is split (src/parallel/layout.cpp): `model` is
  /// then that device's share. Default: one device holds the whole model.
  RankSpec rank;
  std::optional<Budget> budget;  ///< the device memory to check against, when given
  /// memest --from: the file, the keys that set the run's options and those memest does not
  /// model (docs/from.md); absent for a run given by flags and run configs.
  std::optional<FromReport> from;
};

}  // namespace memest
