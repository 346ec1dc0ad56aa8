#pragma once

#include <memest/model.hpp>
#include <memest/run_spec.hpp>
#include <memest/step.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// The MLP activation function, as far as what it saves is concerned.
enum class ActFn { silu, gelu, gelu_new, relu };

/// A LoRA adapter on one linear of every layer (src/model/adapters.cpp): the saved tensor slot of
/// the input it reads (q_in for q/k/v, o_in, mlp_in for gate/up, mlp for down), its width and rank.
struct AdapterSite {
  Slot slot = Slot::q_in;
  std::uint64_t in = 0, rank = 0;
  std::uint64_t out = 0;  ///< the base linear's output features (lora_B's rows)
};

/// Which parameters get gradients, read from the inventory's trainable flags: a linear whose
/// weight needs no gradient does not save its input, and an op none of whose inputs requires
/// grad saves nothing (docs/activations.md, "Frozen weights and LoRA").
struct GradFlow {
  bool embed = true;   ///< the embedding output requires grad (a trainable embedding table)
  bool layers = true;  ///< some parameter of the layers is trainable (adapters included)
  bool norms = true;   ///< the layers' norm weights
  std::uint64_t qkv = 3, mlp_in = 2;  ///< trainable q/k/v and gate/up weights (fused: all)
  bool o = true, down = true;
  bool final_norm = true, head = true;  ///< the final norm's and the lm_head's weights
  std::array<AdapterSite, 8> adapters{};
  std::uint8_t n_adapters = 0;
  bool nf4 = false;              ///< QLoRA: the base linears dequantise a 4-bit weight per use
  bool nf4_keeps_input = false;  ///< bitsandbytes < 0.43.2: each 4-bit linear keeps its input
  double lora_dropout = 0;
};

/// The numbers the activation and peak models read, resolved once from a RunSpec. Plain values;
/// building it allocates nothing but the `notes` strings, which only `approximate` runs fill.
struct ActivationInputs {
  // Sizes first, flags last: the struct is copied per run and per plan (no padding holes).
  std::uint64_t b = 0, s = 0;  ///< micro-batch, sequence length
  std::uint64_t V = 0, h = 0, L = 0, a = 0, k = 0, d = 0;
  std::uint64_t dv = 0;       ///< value head dim (MLA; = d otherwise)
  std::uint64_t I = 0;        ///< dense MLP width
  std::uint64_t experts = 0;  ///< routed experts per MoE layer, 0 for dense
  std::uint64_t topk = 0, I_moe = 0, I_shared = 0, moe_layers = 0;
  std::uint64_t norms = 2;  ///< norms per layer
  double p_attn = 0, p_resid = 0, p_embd = 0;
  /// Megatron-LM's expert capacity factor (--moe-dispatcher alltoall or allgather); 0 = dropless.
  double moe_capacity = 0;
  // Byte widths (docs/activation-derivation.md §1).
  std::uint64_t ex = 4;          ///< residual stream / model dtype
  std::uint64_t ec = 4;          ///< matmul outputs (activation dtype)
  std::uint64_t ew = 2;          ///< autocast weight copies
  std::uint64_t ea = 0;          ///< LoRA adapters of their own dtype (PEFT's fp32), else 0
  std::uint64_t loss_chunk = 0;  ///< chunks (chunked) or positions per chunk (chunked-tokens)
  // One device of a split run (src/parallel/layout.hpp): the dimensions above are its share.
  std::uint64_t t = 1;          ///< tensor-parallel ranks: a, kv, I, V are per rank
  std::uint64_t cp = 1;         ///< context-parallel ranks: s is this rank's part of the sequence
  std::uint64_t ep = 1;         ///< expert-parallel ranks: E/e routed experts per rank
  std::uint64_t in_flight = 1;  ///< micro-batches whose saved tensors the device holds (pipeline)
  HeldChunks held;              ///< the others of them, by chunk (the pipeline schedule's walk)
  std::vector<std::string> notes;  ///< what was assumed (canonical shape, family approximations)
  GradFlow grads;
  LayerGraph graph = LayerGraph::llama;
  ActFn act = ActFn::silu;
  Attention attention = Attention::sdpa;  ///< PyTorch 2 and transformers default
  Recompute recompute = Recompute::none;
  Loss loss = Loss::hf;
  bool shared_gate = false;
  bool gated = false, fused_qkv = false, fused_gate_up = false, parallel = false;
  bool qk_norm = false;
  bool norm_fp32_output = false;  ///< Gemma's RMSNorm: (1 + weight) * x in fp32, cast after
  bool tied = false, lm_head = true, final_norm = true, embedding_norm = false;
  bool rotary = false, learned_positions = false, causal = true;
  bool amp = false;  ///< autocast
  bool cuda = true;
  bool compile = false;              ///< torch.compile of each layer (src/step/rules/compile.cpp)
  bool keeps_output = false;         ///< the training loop holds the model's output (its logits)
  bool output_fp32 = false;          ///< the loop gets the output cast to fp32 (Lightning Fabric)
  bool softmax_keeps_input = false;  ///< PyTorch < 1.11: softmax keeps its input as well
  bool litgpt = false;   ///< LitGPT's modelling code (--model-code litgpt; docs/activations.md)
  bool offload = false;  ///< activation offloading (--offload activations; docs/techniques.md)
  bool sp = false;       ///< sequence parallelism: norms, dropouts, residuals keep N/t
  /// The routed tokens reach grouped experts through a token dispatcher (--moe-dispatcher
  /// alltoall, allgather or torchtitan): the experts compute the rows routed to this rank.
  bool moe_a2a = false;
  /// With moe_a2a: torchtitan's MoE layer and token dispatcher (--moe-dispatcher torchtitan).
  bool moe_torchtitan = false;
  /// With moe_a2a: the tokens reach the experts by Megatron-LM's all-gather dispatcher instead
  /// (--moe-dispatcher allgather); the experts and the router are the same.
  bool moe_allgather = false;
  bool moe_worst = false;    ///< dropless, every token of the group routed to this rank's experts
  bool approximate = false;  ///< a shape or family that was not measured
};

/// The split of the token dimension the sizes use: t under sequence parallelism, else 1.
inline std::uint64_t token_split(const ActivationInputs& in) { return in.sp ? in.t : 1; }

/// Whether activation_inputs writes the notes of an approximate run (ActivationInputs::notes), or
/// skips their strings (the fast path of bytes_needed and the searches).
enum class Notes : std::uint8_t { written, skipped };

/// The activation inputs of a run; nullopt when --batch/--seq are not given. A bare parameter
/// count uses canonical_architecture() and is marked approximate.
std::optional<ActivationInputs> activation_inputs(const RunSpec& run, Notes notes = Notes::written);

/// One saved tensor of an --explain listing: its name, size and shape (the formula is the
/// width times the shape's symbols, with their values at the run's b and s).
struct ActivationTerm {
  Scope scope = Scope::layer;
  std::string_view name;
  std::uint64_t bytes = 0;  ///< one copy
  std::uint64_t count = 0;  ///< copies saved (one per layer); 0 when recomputed, not stored
  std::uint64_t width = 0;  ///< bytes per element
  Shape shape;
};

/// Saved activations of one micro-batch (PyTorch >= 2 semantics), in bytes.
struct ActivationBytes {
  std::uint64_t b = 0, s = 0;  ///< the micro-batch and sequence length they are for
  std::uint64_t t = 1;         ///< the split of N/t (sequence parallelism), 1 without
  /// The model's dimensions the shapes use: hidden, heads, kv heads, head dim, MLP, vocab, layers.
  std::uint64_t h = 0, a = 0, k = 0, d = 0, I = 0, V = 0, L = 0;
  std::uint64_t per_layer = 0;        ///< as stored (the layer input under full recompute)
  std::uint64_t full_layer = 0;       ///< what one layer saves without recompute (also recompute)
  std::uint64_t mlp = 0;              ///< the MLP's part of full_layer
  std::uint64_t layers = 0;           ///< sum over the layers, as stored
  std::uint64_t shared = 0;           ///< rotary cos/sin, masks shared by all layers
  std::uint64_t embed = 0;            ///< position ids, embedding dropout mask / norm
  std::uint64_t head = 0;             ///< final norm, lm_head input, log-probs, target
  std::uint64_t total = 0;            ///< layers + shared + embed + head
  std::uint64_t target = 0;           ///< the loss target's storage (freed first in backward)
  std::vector<ActivationTerm> terms;  ///< every saved tensor, when asked for
};

/// Whether the saved activations come as sums only, or with each tensor listed
/// (ActivationBytes::terms, for --explain).
enum class Terms : std::uint8_t { sums_only, listed };

/// The saved activations, from the step's tensors (include/memest/step.hpp). Throws Error when a
/// size passes 2^64 bytes.
ActivationBytes activation_bytes(const ActivationInputs& in, Terms terms = Terms::sums_only);

}  // namespace memest
