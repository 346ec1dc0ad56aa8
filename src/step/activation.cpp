// The numbers the step's tensors are sized by, resolved once from a run (the tensors themselves
// are in layer_graph.cpp and walk.cpp).
#include "model/families.hpp"

#include <memest/activation.hpp>
#include <memest/error.hpp>
#include <memest/run_spec.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace memest {
namespace {

ActFn parse_act(std::string_view name, bool& known) {
  known = true;
  if (name == "silu" || name == "swish") return ActFn::silu;
  if (name == "gelu" || name == "gelu_pytorch_tanh" || name == "gelu_accurate" || name == "gelu_10")
    return ActFn::gelu;
  if (name == "gelu_new" || name == "gelu_fast" || name == "gelu_python" || name == "quick_gelu")
    return ActFn::gelu_new;
  if (name == "relu" || name == "relu6") return ActFn::relu;
  known = false;
  return ActFn::gelu;
}

// The architecture's dimensions and switches, as the layer graph reads them.
void read_shape(const Architecture& arch, const detail::ModelFamily& family, ActivationInputs& in) {
  const bool rms = arch.rms_norm;
  in.graph = family.graph.value_or(rms ? LayerGraph::llama : LayerGraph::gpt2);
  in.V = arch.vocab_size;
  in.h = arch.hidden_size;
  in.L = arch.num_layers + arch.num_decoder_layers;
  in.a = arch.num_heads;
  in.k = arch.num_kv_heads ? arch.num_kv_heads : arch.num_heads;
  in.d = arch.head_dim ? arch.head_dim : (arch.num_heads ? arch.hidden_size / arch.num_heads : 0);
  in.dv = arch.v_head_dim ? arch.v_head_dim : in.d;
  in.I = arch.intermediate_size;
  in.experts = arch.num_experts;
  in.topk = arch.experts_per_token;
  in.I_moe = arch.moe_intermediate_size ? arch.moe_intermediate_size : arch.intermediate_size;
  in.I_shared = arch.shared_expert_size;
  in.moe_layers = arch.num_experts ? std::min(arch.moe_layers, in.L) : 0;
  in.shared_gate = arch.shared_expert_gate;
  in.norms = arch.norms_per_layer;
  in.gated = arch.gated_mlp;
  in.fused_qkv = arch.fused_qkv;
  in.fused_gate_up = arch.fused_gate_up;
  in.parallel = arch.parallel_block;
  in.qk_norm = arch.qk_norm;
  in.norm_fp32_output = family.norm_fp32_output;
  in.tied = arch.tied_embeddings;
  in.lm_head = arch.lm_head;
  in.final_norm = arch.final_norm;
  in.embedding_norm = arch.embedding_norm;
  in.learned_positions = arch.max_positions > 0;
  in.rotary = arch.max_positions == 0 && arch.relative_attention_buckets == 0;
  in.causal = arch.lm_head;
}

// The config's dropout probabilities, or --dropout at every site the family has: Llama-style
// models have one (attention), the rest three.
void read_dropout(const Architecture& arch, const detail::ModelFamily& family,
                  const TrainingSpec& t, ActivationInputs& in) {
  in.p_attn = arch.attn_dropout;
  in.p_resid = arch.resid_dropout;
  in.p_embd = arch.embd_dropout;
  if (!t.dropout) return;
  const bool all_sites = in.graph == LayerGraph::gpt2 || family.dropout_everywhere;
  in.p_attn = *t.dropout;
  in.p_resid = all_sites ? *t.dropout : 0.0;
  in.p_embd = all_sites ? *t.dropout : 0.0;
}

// What an SDPA call keeps, by the kernel PyTorch's dispatcher picks when k and v come
// unrepeated (--sdpa-enable-gqa; aten/src/ATen/native/transformers/cuda/sdp_utils.cpp): flash or
// cuDNN attention for fp16/bf16 on sm80 and later (both keep what flash keeps, measured on an H200
// in tests/data/truth_cuda); else the memory-efficient kernel, which takes no grouped k/v, so with
// grouped heads the math backend, whose saved tensors in fp32 are eager attention's (measured).
Attention sdpa_kernel(const TrainingSpec& t, const ActivationInputs& in) {
  if (t.attention != Attention::sdpa || !t.sdpa_enable_gqa || t.device != Device::cuda)
    return t.attention;
  if (in.ec == 2 && !t.no_flash_kernel) return Attention::flash;
  return in.k < in.a ? Attention::eager : Attention::sdpa;
}

// Byte widths (docs/activation-derivation.md §1) and the kernels' switches.
void read_policy(const RunSpec& run, ActivationInputs& in) {
  const auto& p = run.precision;
  const auto& t = run.training;
  // FSDP's MixedPrecision runs the module in param_dtype: its gathered parameters.
  in.ex = width(run.parallel.fsdp_param_dtype.value_or(p.param));
  in.ec = width(p.activation);
  in.amp = p.autocast;
  in.ew = p.working ? width(*p.working) : in.ec;
  in.ea = t.adapter_dtype ? width(*t.adapter_dtype) : 0;
  in.cuda = t.device == Device::cuda;
  in.attention = sdpa_kernel(t, in);
  in.recompute = t.recompute;
  in.compile = t.compile;
  in.loss = t.loss;
  in.keeps_output = t.loop_keeps_output;
  in.output_fp32 = t.output_fp32;
  in.softmax_keeps_input = t.softmax_keeps_input;
  in.litgpt = t.model_code == ModelCode::litgpt;
  in.offload = t.offload_activations;
  in.loss_chunk = t.loss_chunk ? t.loss_chunk : (t.loss == Loss::chunked ? 8 : 128);
  in.grads.lora_dropout = t.lora_dropout;
  in.grads.nf4_keeps_input = t.nf4_keeps_input;
}

// The LoRA adapter a lora_A group of the layers adds, by the input its base linear reads;
// false for the routed experts' adapters and modules the layer graph has no input for.
bool adapter_site(const TensorGroup& g, std::uint64_t layers, AdapterSite& site) {
  if (!std::string_view(g.name).ends_with("lora_A.weight") || g.count != layers) return false;
  const std::string_view k = g.kind;  // a length check before any compare
  if (k == "q" || k == "k" || k == "v" || k == "qkv" || k == "kv") {
    site.slot = Slot::q_in;
  } else if (k == "o") {
    site.slot = Slot::o_in;
  } else if (k == "gate" || k == "up" || k == "gate_up") {
    site.slot = Slot::mlp_in;
  } else if (k == "down") {
    site.slot = Slot::mlp;
  } else {
    return false;
  }
  site.in = g.cols;
  site.rank = g.rows;
  return true;
}

// The output features of the LoRA adapter whose lora_A is `a`: its lora_B's rows.
std::uint64_t lora_b_rows(const Inventory& inv, const TensorGroup& a) {
  std::string b = a.name;
  const std::size_t at = b.rfind("lora_A");
  if (at == std::string::npos) return 0;
  b.replace(at, 6, "lora_B");
  for (const TensorGroup& g : inv.groups) {
    if (g.name == b) return g.rows;
  }
  return 0;
}

// One trainable group of the layers: which inputs its gradient needs.
void layer_grad(const TensorGroup& g, GradFlow& f) {
  f.layers = true;
  const std::string_view k = g.kind;  // a length check before any compare
  if (g.role == Role::norm) f.norms = true;
  if (!g.matmul || g.role == Role::adapter) return;
  if (k == "q" || k == "k" || k == "v") f.qkv = std::min<std::uint64_t>(3, f.qkv + 1);
  if (k == "qkv") f.qkv = 3;
  if (k == "kv") f.qkv = std::min<std::uint64_t>(3, f.qkv + 2);
  if (k == "o") f.o = true;
  if (k == "gate" || k == "up") f.mlp_in = std::min<std::uint64_t>(2, f.mlp_in + 1);
  if (k == "gate_up" || (g.role == Role::expert && k != "down")) f.mlp_in = 2;
  if (k == "down") f.down = true;
}

// Which parameters get gradients and where the adapters sit (docs/activations.md, "Frozen
// weights and LoRA"). A bare count keeps the defaults: everything trainable but what --freeze
// froze as a whole.
void read_grads(const RunSpec& run, const Architecture& arch, ActivationInputs& in) {
  const Inventory& inv = run.model.inventory;
  GradFlow& f = in.grads;
  if (!inv.shapes_known) {
    const bool any = trainable_count(inv) > 0;
    f.embed = f.layers = f.norms = f.o = f.down = f.final_norm = f.head = any;
    f.qkv = any ? 3 : 0;
    f.mlp_in = any ? 2 : 0;
    return;
  }
  f.embed = f.layers = f.norms = f.o = f.down = f.final_norm = f.head = false;
  f.qkv = f.mlp_in = 0;
  const std::uint64_t layers = arch.num_layers + arch.num_decoder_layers;
  bool seen_layers = false, lm_head = false;
  for (const TensorGroup& g : inv.groups) {
    if (g.quant_state) continue;
    if (g.storage == Dtype::nf4) f.nf4 = true;
    if (g.name.find('*') != std::string::npos) {
      seen_layers = true;
      AdapterSite site;
      if (adapter_site(g, layers, site) && f.n_adapters < f.adapters.size()) {
        site.out = lora_b_rows(inv, g);
        f.adapters[f.n_adapters++] = site;
      }
      if (g.trainable) layer_grad(g, f);
      continue;
    }
    const bool head = std::string_view(g.kind) == "lm_head";
    if (head) lm_head = true;
    if (!g.trainable) continue;
    if (head) {
      f.head = true;
    } else if (!seen_layers) {
      f.embed = true;  // embeddings and their norm: the first layer's input requires grad
    } else if (g.role == Role::norm) {
      f.final_norm = true;
    }
  }
  if (!lm_head) f.head = arch.tied_embeddings && f.embed;
}

// What was assumed: a canonical shape, a family not measured, an unknown activation function.
void note_assumptions(const RunSpec& run, const Architecture& arch,
                      const detail::ModelFamily& family, bool known_act, Notes notes,
                      ActivationInputs& in) {
  const std::string& mt = arch.model_type;
  const auto note = [&](std::string text) {
    in.approximate = true;
    if (notes == Notes::written) in.notes.push_back(std::move(text));
  };
  if (!run.model.arch) {
    note(fmt::format(
        "bare parameter count: activations and the peak assume a canonical Llama-style decoder "
        "(hidden {}, {} layers, {} heads of {}, MLP {}, vocab {}, untied); approximate",
        arch.hidden_size, arch.num_layers, arch.num_heads, arch.head_dim, arch.intermediate_size,
        arch.vocab_size));
  } else if (!family.measured) {
    const bool llama = in.graph == LayerGraph::llama;
    note(
        fmt::format("{}: activations follow the {} layer graph measured on {} (approximations "
                    "in docs/activations.md){}",
                    mt, llama ? "Llama" : "GPT-2", llama ? "Llama/Mistral/Qwen2" : "GPT-2",
                    family.approximation));
  }
  if (!known_act) {
    note(fmt::format(
        "activation function \"{}\": taken as saving its input and output, as gelu does",
        arch.activation));
  }
  if (arch.vision.layers > 0 && notes == Notes::written) {
    const auto& groups = run.model.inventory.groups;
    std::uint64_t tower = 0;
    for (const TensorGroup& g : groups) tower += g.role == Role::vision ? g.elements() : 0;
    const bool nf4 = std::any_of(groups.begin(), groups.end(),
                                 [](const TensorGroup& g) { return g.storage == Dtype::nf4; });
    in.notes.push_back(fmt::format(
        "{}: its vision tower and projector ({} parameters) are held but not run: a text-only "
        "step gives them no gradient and no optimizer state (image inputs are not modelled{})",
        run.model.name, format_count(tower),
        nf4 ? "; 4-bit loading is taken to leave them unquantised" : ""));
  }
}

// One device of a split run: its model chunk's layers, its part of the sequence, and the
// embeddings and the head only where its stage has them.
void read_rank(const RankSpec& r, const TrainingSpec& t, ActivationInputs& in) {
  if (r.chunk_layers > 0 && r.layers > 0) {
    in.moe_layers = in.moe_layers * r.chunk_layers / r.layers;
    in.L = r.chunk_layers;
  }
  in.t = r.tensor;
  in.sp = r.sequence;
  in.cp = r.context;
  in.s = ceil_div(t.seq_len, r.context);
  in.in_flight = r.in_flight;
  in.held = r.held;
  if (!r.head) {
    in.lm_head = false;
    in.final_norm = false;
  }
  if (!r.embedding) {
    in.learned_positions = false;
    in.embedding_norm = false;
    in.p_embd = 0;
  }
}

// A token dispatcher (Megatron-LM's or torchtitan's): the rows this rank's experts receive
// (layer_graph.cpp's routed_rows) and what is assumed of them.
void read_moe(const ParallelSpec& p, Notes notes, ActivationInputs& in) {
  if (p.moe_dispatcher == MoeDispatcher::hf || in.moe_layers == 0) return;
  in.moe_a2a = true;
  in.moe_allgather = p.moe_dispatcher == MoeDispatcher::allgather;
  in.moe_torchtitan = p.moe_dispatcher == MoeDispatcher::torchtitan;
  in.ep = p.expert;
  in.moe_capacity = p.moe_capacity_factor;
  in.moe_worst = p.moe_capacity_factor == 0 && p.moe_routing == MoeRouting::worst;
  if (notes == Notes::skipped) return;
  const u64 local = in.experts / std::max<u64>(in.ep, 1);
  if (in.moe_capacity > 0) {
    in.notes.push_back(fmt::format(
        "MoE: each expert takes at most {} x its even share of the routed tokens: this rank's "
        "experts receive at most N x top_k x {} rows, counted in full (rounded up per token)",
        in.moe_capacity, in.moe_capacity));
  } else if (in.moe_worst) {
    in.notes.push_back(fmt::format(
        "MoE: dropless, worst case: every token of the {} expert-parallel ranks routed to this "
        "rank's {} experts, {} x N x {} rows",
        in.ep, local, in.ep, std::min(in.topk, local)));
  } else {
    in.notes.push_back(fmt::format(
        "MoE: dropless, routing assumed balanced: this rank's experts receive N x top_k rows, "
        "its share; at worst (--moe-routing worst) {} x N x {}",
        in.ep, std::min(in.topk, local)));
  }
}

}  // namespace

std::optional<ActivationInputs> activation_inputs(const RunSpec& run, Notes notes) {
  const auto& t = run.training;
  if (t.micro_batch == 0 || t.seq_len == 0) return std::nullopt;
  ActivationInputs in;
  Architecture canonical;
  if (!run.model.arch) canonical = canonical_architecture(parameter_count(run.model.inventory));
  const Architecture& arch = run.model.arch ? *run.model.arch : canonical;
  if (arch.ssm_state_size > 0) {
    // The transformer layer graph has no selective scan; its numbers would be wrong, not rough.
    throw Error(fmt::format(
        "model_type \"{}\": the activations of state-space (Mamba) layers are not modelled; "
        "leave out --batch and --seq for the model states (parameters, gradients, optimizer "
        "states), which are exact",
        arch.model_type));
  }
  in.b = t.micro_batch;
  in.s = t.seq_len;
  // The family's table row, looked up once (a binary search over the names).
  const detail::ModelFamily& family = detail::family_of(arch.model_type);
  read_shape(arch, family, in);
  bool known_act = true;
  in.act = parse_act(arch.activation, known_act);
  // LitGPT's GptNeoxMLP calls F.gelu(x, approximate=...): one kernel that keeps its input.
  if (run.training.model_code == ModelCode::litgpt && in.act == ActFn::gelu_new)
    in.act = ActFn::gelu;
  read_dropout(arch, family, t, in);
  read_policy(run, in);
  read_grads(run, arch, in);
  note_assumptions(run, arch, family, known_act, notes, in);
  if (run.rank.split()) read_rank(run.rank, run.training, in);
  read_moe(run.parallel, notes, in);
  return in;
}

}  // namespace memest
