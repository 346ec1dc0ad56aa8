#pragma once

#include <memest/dtype.hpp>
#include <memest/units.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// What a parameter tensor does; used to group the inventory, to freeze parts, and to decide
/// which tensors autocast copies.
enum class Role {
  embedding,
  position,
  attention,
  mlp,
  norm,
  head,
  router,
  expert,
  adapter,
  vision,
  other
};

/// Config/flag spelling of a role: "embedding", "attention", ...
std::string_view role_name(Role role);
/// All role names, in display order.
std::span<const std::string_view> role_names();
/// Parses a role name; throws Error listing the accepted names.
Role parse_role(std::string_view text);

/// A group of identically shaped parameter tensors, e.g. the q_proj weight of every layer.
struct TensorGroup {
  std::string name;  ///< e.g. "layers.*.self_attn.q_proj.weight"
  Role role = Role::other;
  std::uint64_t rows = 1;   ///< first dimension (out_features of a Linear); 1 for a vector
  std::uint64_t cols = 0;   ///< second dimension (in_features), or a vector's length
  std::uint64_t count = 1;  ///< how many tensors of this shape (one per layer, per expert, ...)
  bool matmul = false;      ///< fed to a matmul: autocast casts it, LoRA can target it
  bool trainable = true;
  /// Stored dtype when it differs from the precision policy's parameter dtype (QLoRA's nf4 base).
  std::optional<Dtype> storage;
  /// Quantization constants (absmax scales): stored, but not parameters, so excluded from
  /// parameter_count, tensor_count and every other count; included in parameter_bytes.
  bool quant_state = false;
  /// The module a matmul weight (and its bias) belongs to, as LoRA targets it: "q", "k", "v",
  /// "o", "qkv" and "kv" (fused), "gate", "up", "down", "gate_up" (fused); "router", "pooler",
  /// "proj", "lm_head" for the other matmuls; empty for embeddings and norms.
  std::string kind;

  /// rows * cols: elements of one tensor. Inline: each estimate sums the groups several times.
  std::uint64_t tensor_elements() const { return checked_mul(rows, cols); }
  /// rows * cols * count: elements of the whole group.
  std::uint64_t elements() const { return checked_mul(tensor_elements(), count); }

  bool operator==(const TensorGroup&) const = default;
};

/// How a group's tensors are used, named at the call: `{.matmul = true}`.
struct GroupUse {
  bool matmul = false;    ///< TensorGroup::matmul
  bool trainable = true;  ///< TensorGroup::trainable
};

/// A group of `count` tensors of rows x cols, with the other fields at their defaults.
TensorGroup make_group(std::string name, Role role, std::uint64_t rows, std::uint64_t cols,
                       std::uint64_t count, GroupUse use = {});

/// Every parameter tensor of a model, grouped. Tied tensors appear once.
struct Inventory {
  std::vector<TensorGroup> groups;
  /// False for a bare parameter count: one group stands for all parameters, and the number of
  /// tensors and their shapes are unknown.
  bool shapes_known = true;

  bool operator==(const Inventory&) const = default;
};

/// Total parameters (elements) in the inventory.
std::uint64_t parameter_count(const Inventory& inventory);
/// Parameters with trainable set.
std::uint64_t trainable_count(const Inventory& inventory);
/// Number of parameter tensors (as in model.parameters()); meaningful only when shapes_known.
std::uint64_t tensor_count(const Inventory& inventory);
/// Number of trainable parameter tensors.
std::uint64_t trainable_tensor_count(const Inventory& inventory);
/// Elements of matmul weights (all, or only the trainable ones).
std::uint64_t matmul_weight_count(const Inventory& inventory, bool trainable_only);
/// Bytes the stored parameters take: each group in its `storage` dtype, else `default_dtype`,
/// quant_state groups included; 4-bit tensors round up to a whole byte per tensor.
std::uint64_t parameter_bytes(const Inventory& inventory, Dtype default_dtype);

/// A vision encoder that a multimodal checkpoint holds beside its language model: Gemma 3's
/// SigLIP tower (transformers models/siglip, SiglipVisionModel) and the projector into the text
/// width (models/gemma3, Gemma3MultiModalProjector). Text-only steps never run it, so its
/// parameters are held, frozen, with no gradient and no optimizer state. layers == 0: none.
struct VisionTower {
  std::uint64_t layers = 0;         ///< num_hidden_layers of vision_config
  std::uint64_t hidden = 0;         ///< hidden_size
  std::uint64_t intermediate = 0;   ///< intermediate_size (fc1's width)
  std::uint64_t image = 0;          ///< image_size: the side of an image, in pixels
  std::uint64_t patch = 0;          ///< patch_size: the side of a patch
  std::uint64_t channels = 3;       ///< num_channels
  bool pooling_head = false;        ///< SigLIP's attention-pooling head (vision_use_head)
  std::uint64_t projector_out = 0;  ///< the text width the projector maps into; 0: no projector
  /// mm_tokens_per_image: the embeddings the projector gives an image (Gemma 3: 256)
  std::uint64_t tokens_per_image = 0;

  bool operator==(const VisionTower&) const = default;
};

/// The architecture facts that decide parameter shapes and activations. Read from a Hugging
/// Face config.json (hf_config.hpp) or given inline; absent for a bare parameter count. The
/// defaults past `experts_per_token` describe a pre-norm Llama-style decoder, so an inline
/// architecture that sets only the basic fields gets that layout.
struct Architecture {
  std::string model_type;  ///< family: "llama", "gpt2", ... ("falcon" for RefinedWeb*)
  std::uint64_t vocab_size = 0;
  std::uint64_t hidden_size = 0;
  std::uint64_t num_layers = 0;  ///< decoder layers; the encoder's for encoder-decoders
  std::uint64_t num_heads = 0;
  std::uint64_t num_kv_heads = 0;       ///< = num_heads without GQA/MQA
  std::uint64_t head_dim = 0;           ///< = hidden_size / num_heads unless the config says
  std::uint64_t intermediate_size = 0;  ///< MLP width (dense layers; per expert for Mixtral)
  std::uint64_t max_positions = 0;      ///< rows of a learned position table, 0 if none
  std::uint64_t max_seq_len = 0;    ///< longest sequence a learned position table indexes; 0: none
  bool gated_mlp = false;           ///< gate, up and down projections (SwiGLU)
  bool rms_norm = false;            ///< RMSNorm (weight only) instead of LayerNorm
  bool parallel_block = false;      ///< attention and MLP read one normed input (GPT-J, Phi)
  bool tied_embeddings = false;     ///< lm_head shares the input embedding
  std::string activation = "silu";  ///< MLP activation function, HF spelling
  double attn_dropout = 0.0;        ///< dropout on attention probabilities
  double resid_dropout = 0.0;       ///< dropout after attention and MLP outputs
  double embd_dropout = 0.0;        ///< dropout after the embeddings
  std::uint64_t num_experts = 0;    ///< MoE routed experts per MoE layer, 0 for dense
  std::uint64_t experts_per_token = 0;  ///< MoE top-k

  // Norms.
  std::uint64_t norms_per_layer = 2;  ///< per (encoder) layer: 2 pre-norm, 1 parallel, 4 Gemma-2
  bool norm_affine = true;            ///< norms have a weight (false: OLMo's parameter-free norm)
  bool norm_bias = true;              ///< LayerNorms also have a bias (never RMSNorm)
  bool final_norm = true;             ///< a norm after the last layer (T5: of each half)
  bool embedding_norm = false;        ///< a norm right after the embeddings (BERT)
  bool qk_norm = false;               ///< norms of head_dim on queries and keys (Phi qk_layernorm)
  /// The q and k norms span every head with weights of their own: heads x head_dim and
  /// kv_heads x head_dim, weight only (OLMo-2, OLMoE, Cohere use_qk_norm, StableLM qk_layernorm).
  bool qk_norm_full_width = false;

  // Biases and heads.
  bool qkv_bias = false;       ///< q, k and v projections have biases
  bool attn_out_bias = false;  ///< the attention output projection has a bias
  bool mlp_bias = false;       ///< every MLP projection has a bias
  bool lm_head = true;         ///< an output projection exists (false: an encoder's base model)
  bool lm_head_bias = false;   ///< the output projection has a bias (GPT-J, Phi)
  bool pooler = false;         ///< BERT pooler: a dense hidden x hidden layer with bias

  // Tensor layout (decides the tensor count, not the parameter count).
  bool fused_qkv = false;      ///< one tensor for q, k and v (GPT-2 c_attn, NeoX, Falcon, Phi-3)
  bool fused_gate_up = false;  ///< one tensor for gate and up (Phi-3)

  // Embeddings.
  std::uint64_t embedding_dim = 0;    ///< token embedding width when not hidden_size (OPT
                                      ///< word_embed_proj_dim): adds project_in and project_out
  std::uint64_t type_vocab_size = 0;  ///< rows of the token-type table (BERT), 0 for none

  // Mixture of experts.
  std::uint64_t moe_layers = 0;             ///< layers with a MoE block; the rest are dense
  std::uint64_t moe_intermediate_size = 0;  ///< width of one routed expert
  std::uint64_t shared_expert_size = 0;     ///< width of the always-active shared MLP, 0 if none
  std::uint64_t num_shared_experts = 0;     ///< shared experts fused into that width
  bool shared_expert_gate = false;          ///< Linear(hidden, 1) gate on it (Qwen2-MoE)
  bool router_bias = false;                 ///< the router Linear has a bias (gpt-oss)
  /// The experts of a layer are two 3-D parameters, gate_up_proj [E, h, 2 I] and down_proj
  /// [E, I, h], each with a bias (gpt-oss's GptOssExperts), not E modules of Linears.
  bool fused_experts = false;
  bool attention_sinks = false;  ///< one learned sink logit per head and layer (gpt-oss)

  // Selective state-space layers (Mamba); ssm_state_size > 0 turns them on and replaces
  // attention and the MLP by one mixer per layer.
  std::uint64_t ssm_state_size = 0;   ///< N: the state per channel (A_log is I x N)
  std::uint64_t ssm_conv_kernel = 0;  ///< depthwise causal conv1d width
  std::uint64_t ssm_dt_rank = 0;      ///< rank of the time-step projection
  bool ssm_conv_bias = true;          ///< conv1d has a bias (use_conv_bias)

  // Multi-head latent attention (DeepSeek-V2); kv_lora_rank > 0 turns it on.
  std::uint64_t q_lora_rank = 0;       ///< 0: one q_proj, else q_a_proj, q_a_layernorm, q_b_proj
  std::uint64_t kv_lora_rank = 0;      ///< width of the compressed key/value latent
  std::uint64_t qk_nope_head_dim = 0;  ///< per-head query/key width without rotary
  std::uint64_t qk_rope_head_dim = 0;  ///< per-head query/key rotary width (key part shared)
  std::uint64_t v_head_dim = 0;        ///< per-head value width

  // Encoder-decoder (T5).
  std::uint64_t num_decoder_layers = 0;          ///< 0 for decoder-only and encoder-only models
  std::uint64_t relative_attention_buckets = 0;  ///< T5 relative bias (buckets x heads), first
                                                 ///< layer of the encoder and of the decoder

  /// A vision encoder held beside the language model (Gemma 3's multimodal checkpoints).
  VisionTower vision;

  bool operator==(const Architecture&) const = default;
};

/// The parameter tensors of an architecture, grouped per kind with count = number of layers
/// (or layers x experts), in Hugging Face module order and naming. Tied embeddings appear once.
/// Every group is trainable; matmul is set on Linear weights and the lm_head.
Inventory build_inventory(const Architecture& arch);

/// Parameters used per token: the total minus the routed experts a token skips
/// ((num_experts - experts_per_token) experts in each MoE layer); the total for dense models.
std::uint64_t active_parameter_count(const Architecture& arch, const Inventory& inventory);

/// The canonical Llama-style decoder memest assumes for a bare parameter count
/// (docs/activations.md): hidden from a size table, layers = round((P - 2*32000*h) / (12 h^2)),
/// vocab 32000, head_dim 128 (64 below h = 2048), no GQA, SwiGLU width 8h/3 rounded up to a
/// multiple of 256, untied.
Architecture canonical_architecture(std::uint64_t params);

/// Which layer graph decides what is saved for backward (docs/activations.md):
/// llama: RMSNorm computed in fp32, rotary, gated MLP, softmax(dtype=float32) (Llama, Mistral,
/// Qwen2, Gemma, Mixtral, DeepSeek, Phi-3, OLMo, T5 by approximation);
/// gpt2: LayerNorm (mean and rstd saved), biases, softmax in the score dtype (GPT-2, OPT, BERT,
/// RoBERTa, GPT-NeoX, GPT-J, Phi, Falcon).
enum class LayerGraph { llama, gpt2 };

/// How a checkpoint stores its weights when its config.json has a `quantization_config`: read so
/// the output can say it, since the estimate sizes parameters by the precision policy (the
/// weights dequantised for training, or --qlora's 4-bit base), never by the checkpoint.
struct CheckpointQuant {
  std::string method;            ///< quant_method as written: "fp8", "mxfp4", "bitsandbytes", ...
  double bits_per_weight = 0.0;  ///< storage bits per quantised weight, scales included
  std::string detail;            ///< how the bits follow, e.g. "4-bit values + 8-bit scale per 32"
  /// GPTQ and AWQ: the quantization_config's own keys, as vLLM's GPTQ/AWQ configs read them
  /// (serving sizes each packed tensor from them).
  std::uint64_t bits = 0;
  std::uint64_t group_size = 0;  ///< inputs per group; 0: one group per output (group_size -1)
  bool desc_act = false;         ///< GPTQ's activation order (g_idx kept)
  bool sym = true;               ///< GPTQ: symmetric (no zero points in Marlin's layout)
  /// bitsandbytes (bits 4 or 8): bnb_4bit_use_double_quant, and llm_int8_skip_modules (the
  /// modules left unquantised).
  bool double_quant = false;
  std::vector<std::string> skip_modules;

  bool operator==(const CheckpointQuant&) const = default;
};

/// A model as memest sees it: a name, its inventory and, when known, its architecture.
struct ModelSpec {
  std::string name;
  /// Where the config came from when it was looked up (a Hub id's preset or the local cache).
  std::string source;
  std::optional<CheckpointQuant> checkpoint_quant;
  std::optional<Architecture> arch;
  Inventory inventory;
  /// Parameters used per token (MoE top-k); equals the total for dense models.
  std::uint64_t active_params = 0;
  /// A bare parameter count's stand-in for the tensors it does not have: the inventory of
  /// canonical_architecture(count), which the training step is walked over (model_from_count
  /// fills it). Empty when the shapes are known.
  Inventory canonical_inventory;

  bool operator==(const ModelSpec&) const = default;
};

/// A model known only by its parameter count: one group, shapes unknown, every parameter
/// counted as a trainable matmul weight (the bulk of a transformer; stated in the output), and
/// the canonical architecture's tensors for the step.
ModelSpec model_from_count(std::uint64_t params);

}  // namespace memest
