// The bytes of a GGUF model's weights: the type llama.cpp's quantizer gives each tensor for a
// file type (llama_tensor_get_type, in llama.cpp until 2025 and src/llama-quant.cpp after; read
// at commit 007dbbf3, whose rules these are except that the builds of the logs here still give a
// fused QKV its own rule: Q4_K_M -> q5_K, as Phi-3's 32 q5_K tensors show), ggml's block sizes,
// and where llama.cpp puts each tensor: token_embd always in host memory (the input layer), the
// last --n-gpu-layers layers on the GPU, the output when every layer is.
#include "serve/serve_gguf.hpp"

#include "base/names.hpp"
#include "serve/ggml_types.hpp"

#include <memest/error.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

namespace memest {
namespace {

// data table: the types a weight can take here, their sizes from ggml's (src/serve/ggml_types.hpp);
// iq2_k to iq6_k are ik_llama.cpp's
constexpr std::array<GgmlType, 20> kWeightTypes = {{
    ggml_traits("f32"),   ggml_traits("f16"),    ggml_traits("bf16"),   ggml_traits("q4_0"),
    ggml_traits("q4_1"),  ggml_traits("q5_0"),   ggml_traits("q5_1"),   ggml_traits("q8_0"),
    ggml_traits("q2_K"),  ggml_traits("q3_K"),   ggml_traits("q4_K"),   ggml_traits("q5_K"),
    ggml_traits("q6_K"),  ggml_traits("iq4_nl"), ggml_traits("iq4_xs"), ggml_traits("iq2_k"),
    ggml_traits("iq3_k"), ggml_traits("iq4_k"),  ggml_traits("iq5_k"),  ggml_traits("iq6_k"),
}};

const GgmlType* find_weight_type(std::string_view name) {
  for (const GgmlType& t : kWeightTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const GgmlType& weight_type(std::string_view name) {
  if (const GgmlType* t = find_weight_type(name)) return *t;
  throw Error(fmt::format("ggml type \"{}\" has no size here", name));
}

// ik_llama.cpp's llama-quantize --custom-q: REGEX=TYPE rules tried in order on a tensor's name,
// the first found in it (std::regex_search) giving its type over the file type's
// (llama_tensor_get_type, src/llama.cpp at 5236c98b).
TensorRules<const GgmlType*> custom_types(
    const std::vector<std::pair<std::string, std::string>>& q) {
  TensorRules<const GgmlType*> out;
  for (const auto& [pattern, name] : q) {
    const GgmlType* t = find_weight_type(name);
    if (!t || t->block == 1) {  // f32/f16/bf16 are not quantisation rules' types
      std::vector<std::string_view> names;
      for (const GgmlType& w : kWeightTypes) {
        if (w.block > 1) names.push_back(w.name);
      }
      throw Error(fmt::format("--custom-q: \"{}={}\": unknown ggml type (expected one of: {})",
                              pattern, name, fmt::join(names, ", ")));
    }
    out.add(tensor_pattern(pattern, "--custom-q"), t);
  }
  return out;
}

// A file type (llama_ftype) and the type its tensors start from.
struct FileType {
  std::string_view name;
  std::string_view base;
};

// data table
constexpr std::array<FileType, 11> kFileTypes = {{
    {"F16", "f16"},
    {"BF16", "bf16"},
    {"Q8_0", "q8_0"},
    {"Q4_0", "q4_0"},
    {"Q5_0", "q5_0"},
    {"Q6_K", "q6_K"},
    {"Q5_K_M", "q5_K"},
    {"Q5_K_S", "q5_K"},
    {"Q4_K_M", "q4_K"},
    {"Q4_K_S", "q4_K"},
    {"IQ4_XS", "iq4_xs"},
}};

enum class TensorCategory {
  token_embd,
  output,
  attn_v,
  attn_qkv,
  attn_k,
  attn_q,
  attn_output,
  ffn_down,
  other
};

TensorCategory category_of(const TensorGroup& g, const Architecture& a) {
  if (g.kind == "lm_head") return TensorCategory::output;
  if (g.role == Role::embedding && g.rows == a.vocab_size) return TensorCategory::token_embd;
  if (g.kind == "v") return TensorCategory::attn_v;
  if (g.kind == "qkv") return TensorCategory::attn_qkv;
  if (g.kind == "k") return TensorCategory::attn_k;
  if (g.kind == "q") return TensorCategory::attn_q;
  if (g.kind == "o") return TensorCategory::attn_output;
  if (g.kind == "down") return TensorCategory::ffn_down;
  return TensorCategory::other;
}

bool use_more_bits(u64 i, u64 n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

struct Quantizer {
  std::string_view ftype;
  std::string_view base;
  u64 n_layer = 0;
  u64 n_expert = 0;
  u64 n_gqa = 1;
  bool seventy_b = false;  // LLM_TYPE_70B: Llama's 80 layers
  // The quantizer of llama.cpp at caf5f9e6 (2023-12-13, Mixtral's support merged): its
  // get_k_quant_type finds "ffn_down.weight" in a tensor's name, which the routed experts of
  // that month's files (blk.N.ffn_down.E.weight, one tensor per expert) do not hold, so they keep
  // the file type's base type; attn_output has no rule for eight experts yet.
  bool dec_2023 = false;
};

// attn_v: Q4_K_M/Q5_K_M give q6_K to the layers use_more_bits picks, Q4_K_S q5_K to the first
// four, IQ4_XS q5_K under GQA >= 4; Llama-70B lifts q4_K to q5_K, eight experts give q8_0.
std::string_view attn_v_type(const Quantizer& q, std::string_view t, u64 i) {
  if (q.ftype == "IQ4_XS" && q.n_gqa >= 4) t = "q5_K";
  if ((q.ftype == "Q4_K_M" || q.ftype == "Q5_K_M") && use_more_bits(i, q.n_layer)) t = "q6_K";
  if (q.ftype == "Q4_K_S" && i < 4) t = "q5_K";
  if (q.seventy_b && t == "q4_K") t = "q5_K";
  if (q.n_expert == 8) t = "q8_0";
  return t;
}

std::string_view ffn_down_type(const Quantizer& q, std::string_view t, u64 i) {
  const u64 n = q.n_layer;
  if ((q.ftype == "Q4_K_M" || q.ftype == "Q5_K_M") && use_more_bits(i, n)) return "q6_K";
  if (q.ftype == "IQ4_XS" && i < n / 8) return "q5_K";  // without an importance matrix
  if (q.ftype == "Q4_K_S" && i < n / 8) return "q5_K";
  return t;
}

// The type of one 2-D tensor of category `c` in layer `i` (llama_tensor_get_type_impl); `expert`
// for a routed expert's.
std::string_view tensor_type(const Quantizer& q, TensorCategory c, u64 i, u64 cols, bool expert) {
  std::string_view t = q.base;
  if (q.base == "f16" || q.base == "bf16") return t;  // not a quantised type: no mixture
  switch (c) {
    case TensorCategory::output:
      t = cols % weight_type(t).block != 0 ? "q8_0" : t == "q8_0" ? t : "q6_K";
      break;
    case TensorCategory::attn_v:
      t = attn_v_type(q, t, i);
      break;
    case TensorCategory::attn_qkv:
      if (q.ftype == "Q4_K_M") t = "q5_K";
      if (q.ftype == "Q5_K_M") t = "q6_K";
      break;
    case TensorCategory::attn_k:
      if (q.n_expert == 8) t = "q8_0";
      break;
    case TensorCategory::attn_output:
      if (q.n_expert == 8 && !q.dec_2023 &&
          (q.ftype == "Q4_K_M" || q.ftype == "Q4_K_S" || q.ftype == "IQ4_XS")) {
        t = "q5_K";
      }
      break;
    case TensorCategory::ffn_down:
      if (!(q.dec_2023 && expert)) t = ffn_down_type(q, t, i);
      break;
    default:
      break;
  }
  // tensor_type_fallback: rows not whole blocks of a k-quant take a 32-block type.
  if (cols % weight_type(t).block != 0) {
    t = t == "q4_K"     ? "q5_0"
        : t == "q5_K"   ? "q5_1"
        : t == "q6_K"   ? "q8_0"
        : t == "iq4_xs" ? "iq4_nl"
                        : "f16";
  }
  return t;
}

u64 tensor_bytes(const GgmlType& t, u64 rows, u64 cols) {
  return checked_mul(rows, checked_mul(cols / t.block, t.bytes));
}

const FileType& file_type(std::string_view name) {
  for (const FileType& f : kFileTypes) {
    if (f.name == name) return f;
  }
  throw Error(fmt::format("--quantization: unknown GGUF file type \"{}\" (expected one of: {})",
                          name, fmt::join(gguf_file_type_names(), ", ")));
}

// The layer of tensor j of a group: groups of every layer hold count / layers tensors each; a
// group of the MoE layers (DeepSeek's experts, routers and shared experts) covers the last
// moe_layers layers, one of the dense MLP layers the first ones (first_k_dense_replace).
std::optional<u64> group_layer(const TensorGroup& g, const Architecture& a, u64 j) {
  if (g.name.find('*') == std::string::npos) return std::nullopt;
  const u64 n = a.num_layers;
  const u64 moe = a.num_experts > 0 ? a.moe_layers : 0;
  if (g.count % n == 0) return j / (g.count / n);
  if (moe > 0 && moe < n && g.count % moe == 0) return n - moe + j / (g.count / moe);
  if (moe > 0 && moe < n && g.count % (n - moe) == 0) return j / (g.count / (n - moe));
  return j * n / g.count;
}

// data table
constexpr std::array<std::pair<std::string_view, std::string_view>, 13> kModuleNames = {{
    {"q_a_proj", "attn_q_a"},
    {"q_b_proj", "attn_q_b"},
    {"kv_a_proj_with_mqa", "attn_kv_a_mqa"},
    {"kv_b_proj", "attn_kv_b"},
    {"q_a_layernorm", "attn_q_a_norm"},
    {"kv_a_layernorm", "attn_kv_a_norm"},
    {"q_norm", "attn_q_norm"},
    {"k_norm", "attn_k_norm"},
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"},
    {"gate_proj", "ffn_gate"},
    {"up_proj", "ffn_up"},
    {"down_proj", "ffn_down"},
}};

// The name llama.cpp gives a tensor (convert_hf_to_gguf's tensor map, gguf-py's
// tensor_mapping.py, for the modules memest's inventory has): token_embd, output, output_norm,
// blk.N.attn_q/k/v/output/qkv, the MLA projections, the norms, blk.N.ffn_gate/up/down, with
// _exps for routed experts and _shexp for shared ones, ffn_gate_inp for the router.
std::string gguf_tensor_name(const TensorGroup& g, TensorCategory c, std::optional<u64> layer) {
  const bool bias = g.name.ends_with(".bias");
  std::string module = g.name.substr(0, g.name.rfind('.'));
  module = module.substr(module.rfind('.') + 1);
  std::string base;
  if (c == TensorCategory::token_embd) base = "token_embd";
  if (c == TensorCategory::output) base = "output";
  if (base.empty() && g.role == Role::norm && !layer) base = "output_norm";
  if (base.empty() && g.role == Role::router) base = "ffn_gate_inp";
  for (const auto& [hf, gguf] : kModuleNames) {
    if (base.empty() && module == hf) base = gguf;
  }
  const std::string& k = g.kind;
  if (base.empty() && (k == "q" || k == "k" || k == "v" || k == "qkv")) base = "attn_" + k;
  if (base.empty() && k == "o") base = "attn_output";
  if (base.empty() && (k == "gate" || k == "up" || k == "down")) base = "ffn_" + k;
  if (base.empty() && k == "gate_up") base = "ffn_up";
  if (base.empty() && k == "fused_experts") {
    base = g.name.find("down") != std::string::npos ? "ffn_down" : "ffn_gate_up";
  }
  if (base.empty()) base = module;
  if (base.starts_with("ffn_") && (g.role == Role::expert || k == "fused_experts")) base += "_exps";
  if (base.starts_with("ffn_") && g.name.find("shared_expert") != std::string::npos) {
    base += "_shexp";
  }
  const std::string prefix = layer ? fmt::format("blk.{}.", *layer) : std::string();
  return prefix + base + (bias ? ".bias" : ".weight");
}

}  // namespace

constexpr auto kFileTypeNames = detail::row_names(kFileTypes);
// data table: the quantizers whose rules gguf_weights knows; [1] is Quantizer::dec_2023's
constexpr std::array<std::string_view, 2> kQuantizerNames = {"current", "2023-12"};

std::span<const std::string_view> gguf_quantizer_names() { return kQuantizerNames; }

std::span<const std::string_view> gguf_file_type_names() { return kFileTypeNames; }

namespace {

// What types a tensor: the quantizer's rules, then --custom-q's.
struct Typing {
  const Architecture& a;
  const Quantizer& q;
  TensorRules<const GgmlType*>& rules;
};

// The j-th tensor of group `g` (category `c`, in `layer`), typed and sized; `type` its type.
LlamaTensor typed_tensor(const TensorGroup& g, TensorCategory c, std::optional<u64> layer,
                         const Typing& ty, const GgmlType** type) {
  // 1-D tensors (norms, biases) and the router stay F32 as convert_hf_to_gguf writes them.
  const bool quantised = g.rows > 1 && g.role != Role::router && g.role != Role::norm;
  // A tied embedding is typed as the output.
  const bool tied = c == TensorCategory::token_embd && ty.a.tied_embeddings;
  LlamaTensor t;
  t.name = gguf_tensor_name(g, c, layer);
  const GgmlType* custom = quantised ? ty.rules.find(t.name).value_or(nullptr) : nullptr;
  if (custom && g.cols % custom->block != 0) {  // change_type_if_necessary: not modelled
    throw Error(
        fmt::format("--custom-q: {} has rows of {} elements, not whole {}-element blocks of {}",
                    t.name, g.cols, custom->block, custom->name));
  }
  *type = custom
              ? custom
              : &weight_type(quantised
                                 ? tensor_type(ty.q, tied ? TensorCategory::output : c,
                                               layer.value_or(0), g.cols,
                                               g.role == Role::expert || g.kind == "fused_experts")
                                 : "f32");
  t.layer = layer;
  t.input = c == TensorCategory::token_embd;
  t.matrix =
      g.matmul && g.rows > 1 && g.role != Role::expert && !t.input && g.kind != "fused_experts";
  t.bytes = tensor_bytes(**type, g.rows, g.cols);
  t.rows = g.rows;
  t.ne0 = g.cols;
  t.pad_bytes = g.cols % 512 == 0 ? 0 : tensor_bytes(**type, 1, 512 - g.cols % 512);
  return t;
}

}  // namespace

GgufWeights gguf_weights(const ServeModel& m, std::string_view ftype, std::string_view quantizer,
                         const std::vector<std::pair<std::string, std::string>>& custom_q) {
  const Architecture& a = *m.spec.arch;
  const FileType& f = file_type(ftype);
  const Quantizer q{f.name,
                    f.base,
                    a.num_layers,
                    a.num_experts,
                    a.num_kv_heads > 0 ? a.num_heads / a.num_kv_heads : 1,
                    a.num_layers == 80 && a.model_type == "llama",
                    quantizer == kQuantizerNames[1]};
  TensorRules<const GgmlType*> rules = custom_types(custom_q);
  const Typing ty{a, q, rules};
  GgufWeights w;
  std::optional<LlamaTensor> tied_copy;
  for (const TensorGroup& g : m.spec.inventory.groups) {
    const TensorCategory c = category_of(g, a);
    // Today's files hold a layer's routed experts as one 3-D tensor (ffn_*_exps); those of the
    // 2023-12 quantizer one tensor per expert.
    const bool stacked = g.role == Role::expert && !q.dec_2023;
    u64 one = 0;  // the bytes of one expert of the stacked tensor
    for (u64 j = 0; j < g.count; ++j) {
      const std::optional<u64> layer = group_layer(g, a, j);
      if (stacked && j > 0 && w.tensors.back().layer == layer) {
        w.tensors.back().bytes = checked_add(w.tensors.back().bytes, one);
        continue;
      }
      const GgmlType* type = nullptr;
      LlamaTensor t = typed_tensor(g, c, layer, ty, &type);
      one = t.bytes;
      if (type->name != "f32") ++w.tensors_by_type[std::string(type->name)];
      if (t.input && a.tied_embeddings) {  // llama.cpp keeps a copy of it as the output
        tied_copy = t;
        tied_copy->tied_copy = true;
        tied_copy->input = false;
      }
      w.tensors.push_back(std::move(t));
    }
  }
  if (tied_copy) w.tensors.push_back(*tied_copy);
  return w;
}

}  // namespace memest
