#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memest {

/// What a parameter tensor does; used to group the inventory, to freeze parts, and to decide
/// which tensors autocast copies.
enum class Role { embedding, position, attention, mlp, norm, head, router, expert, adapter, other };

/// Config/flag spelling of a role: "embedding", "attention", ...
std::string_view role_name(Role role);
/// All role names, in display order.
std::span<const std::string_view> role_names();
/// Parses a role name; throws Error listing the accepted names.
Role parse_role(std::string_view text);

/// A group of identically shaped parameter tensors, e.g. the q_proj weight of every layer.
struct TensorGroup {
  std::string name;         ///< e.g. "layers.*.self_attn.q_proj.weight"
  Role role = Role::other;
  std::uint64_t rows = 1;   ///< first dimension (out_features of a Linear); 1 for a vector
  std::uint64_t cols = 0;   ///< second dimension (in_features), or a vector's length
  std::uint64_t count = 1;  ///< how many tensors of this shape (one per layer, per expert, ...)
  bool matmul = false;      ///< fed to a matmul: autocast casts it, LoRA can target it
  bool trainable = true;

  /// rows * cols: elements of one tensor.
  std::uint64_t tensor_elements() const;
  /// rows * cols * count: elements of the whole group.
  std::uint64_t elements() const;
};

/// Every parameter tensor of a model, grouped. Tied tensors appear once.
struct Inventory {
  std::vector<TensorGroup> groups;
  /// False for a bare parameter count: one group stands for all parameters, and the number of
  /// tensors and their shapes are unknown.
  bool shapes_known = true;
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

/// The architecture facts that decide parameter shapes and activations. Read from a Hugging
/// Face config.json (config.hpp) or given inline; absent for a bare parameter count.
struct Architecture {
  std::string model_type;               ///< HF model_type: "llama", "gpt2", ...
  std::uint64_t vocab_size = 0;
  std::uint64_t hidden_size = 0;
  std::uint64_t num_layers = 0;
  std::uint64_t num_heads = 0;
  std::uint64_t num_kv_heads = 0;       ///< = num_heads without GQA/MQA
  std::uint64_t head_dim = 0;           ///< = hidden_size / num_heads unless the config says
  std::uint64_t intermediate_size = 0;  ///< MLP width (per expert for MoE)
  std::uint64_t max_positions = 0;      ///< rows of a learned position table, 0 if none
  bool gated_mlp = false;               ///< gate, up and down projections (SwiGLU)
  bool rms_norm = false;                ///< RMSNorm (weight only) instead of LayerNorm
  bool parallel_block = false;          ///< attention and MLP read one normed input (GPT-J, Phi)
  bool tied_embeddings = false;         ///< lm_head shares the input embedding
  std::string activation = "silu";      ///< MLP activation function, HF spelling
  double attn_dropout = 0.0;            ///< dropout on attention probabilities
  double resid_dropout = 0.0;           ///< dropout after attention and MLP outputs
  double embd_dropout = 0.0;            ///< dropout after the embeddings
  std::uint64_t num_experts = 0;        ///< MoE routed experts per MoE layer, 0 for dense
  std::uint64_t experts_per_token = 0;  ///< MoE top-k
};

/// A model as memest sees it: a name, its inventory and, when known, its architecture.
struct ModelSpec {
  std::string name;
  std::optional<Architecture> arch;
  Inventory inventory;
  /// Parameters used per token (MoE top-k); equals the total for dense models.
  std::uint64_t active_params = 0;
};

/// A model known only by its parameter count: one group, shapes unknown, every parameter
/// counted as a trainable matmul weight (the bulk of a transformer; stated in the output).
ModelSpec model_from_count(std::uint64_t params);

}  // namespace memest
