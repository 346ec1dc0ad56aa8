// What each layer saves for backward: a port of docs/activation-derivation.md §3 (measured for
// Llama/Mistral/Qwen2 and GPT-2 on the CPU) with the CUDA, SDPA/flash and family generalisations
// of §5 and docs/activations.md.
#include <memest/activation.hpp>
#include <memest/error.hpp>
#include <memest/estimate.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace memest {
namespace {

using u64 = std::uint64_t;

// Every base product stays below this, so the small sums and multiples below cannot overflow.
constexpr u64 kMaxProduct = u64{1} << 50;

u64 width(Dtype d) { return std::max<u64>(1, bits(d) / 8); }

u64 product(std::initializer_list<u64> factors) {
  u64 p = 1;
  for (u64 f : factors) p = checked_mul(p, f);
  if (p >= kMaxProduct) {
    throw Error(fmt::format("activations: a tensor of {} elements is beyond what memest models",
                            format_count(p)));
  }
  return p;
}

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

std::string_view act_label(ActFn a) {
  constexpr std::array<std::string_view, 4> kLabels = {"silu", "gelu", "gelu_new", "relu"};
  return kLabels[static_cast<std::size_t>(a)];
}

// Writes terms only when asked: the numbers are computed either way, the strings only for
// --explain, so searches pay nothing for them.
class Sink {
 public:
  explicit Sink(std::vector<ActivationTerm>* out) : out_(out) {}
  template <typename F>
  u64 add(const char* scope, std::string_view name, u64 bytes, F&& formula) {
    if (out_ && bytes > 0) out_->push_back({scope, std::string(name), bytes, formula()});
    return bytes;
  }
  template <typename F>
  void note(const char* scope, std::string_view name, F&& formula) {
    if (out_) out_->push_back({scope, std::string(name), 0, formula()});
  }

 private:
  std::vector<ActivationTerm>* out_;
};

// Bytes an MLP of `width` saves for `tokens` tokens (derivation §3.1 variants, §3.2, §5.1).
u64 mlp_bytes(const ActivationInputs& in, u64 tokens, u64 mlp_width) {
  const u64 m = product({tokens, mlp_width});
  u64 act = 0;
  switch (in.act) {
    case ActFn::gelu_new:
      // pow input, tanh, 0.5x, 1+tanh, product; CUDA autocast runs pow/tanh in fp32.
      act = (in.amp && in.cuda ? 16 : 5 * in.ec) * m + 24;
      break;
    case ActFn::silu:
    case ActFn::gelu:
      act = 2 * in.ec * m;  // the input (saved by the activation) and the output
      break;
    case ActFn::relu:
      act = in.ec * m;  // the output, saved by ReluBackward0 and the next matmul at once
      break;
  }
  return in.gated ? act + 2 * in.ec * m : act;  // gated: the up output and the product
}

}  // namespace

Architecture canonical_architecture(std::uint64_t params) {
  struct Size {
    std::uint64_t below, hidden;
  };
  constexpr std::array<Size, 9> kSizes = {{{200'000'000, 768},
                                           {500'000'000, 1024},
                                           {1'200'000'000, 2048},
                                           {2'500'000'000, 2560},
                                           {5'000'000'000, 3072},
                                           {10'000'000'000, 4096},
                                           {20'000'000'000, 5120},
                                           {40'000'000'000, 6656},
                                           {100'000'000'000, 8192}}};
  Architecture a;
  a.model_type = "llama";
  a.hidden_size = 12288;
  for (const auto& sz : kSizes) {
    if (params < sz.below) {
      a.hidden_size = sz.hidden;
      break;
    }
  }
  const u64 h = a.hidden_size;
  a.vocab_size = 32000;
  a.head_dim = h >= 2048 ? 128 : 64;
  a.num_heads = h / a.head_dim;
  a.num_kv_heads = a.num_heads;
  a.intermediate_size = ceil_div(ceil_div(8 * h, 3), 256) * 256;
  const u64 embed = 2 * a.vocab_size * h;
  const double per_layer = 12.0 * static_cast<double>(h) * static_cast<double>(h);
  const double layers =
      params > embed ? std::round(static_cast<double>(params - embed) / per_layer) : 1.0;
  a.num_layers = std::max<u64>(1, static_cast<u64>(layers));
  a.gated_mlp = true;
  a.rms_norm = true;
  a.norm_bias = false;
  return a;
}

std::optional<ActivationInputs> activation_inputs(const RunSpec& run, bool with_notes) {
  const auto& t = run.training;
  if (t.micro_batch == 0 || t.seq_len == 0) return std::nullopt;
  ActivationInputs in;
  Architecture canonical;
  if (!run.model.arch) canonical = canonical_architecture(parameter_count(run.model.inventory));
  const Architecture& arch = run.model.arch ? *run.model.arch : canonical;
  if (!run.model.arch) {
    in.approximate = true;
    if (with_notes)
      in.notes.push_back(fmt::format(
          "bare parameter count: activations and the peak assume a canonical Llama-style decoder "
          "(hidden {}, {} layers, {} heads of {}, MLP {}, vocab {}, untied); approximate",
          arch.hidden_size, arch.num_layers, arch.num_heads, arch.head_dim, arch.intermediate_size,
          arch.vocab_size));
  }
  const std::string& mt = arch.model_type;
  in.graph = arch.rms_norm ? LayerGraph::llama : LayerGraph::gpt2;
  bool known_act = true;
  in.act = parse_act(arch.activation, known_act);
  in.b = t.micro_batch;
  in.s = t.seq_len;
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
  in.tied = arch.tied_embeddings;
  in.lm_head = arch.lm_head;
  in.final_norm = arch.final_norm;
  in.embedding_norm = arch.embedding_norm;
  in.learned_positions = arch.max_positions > 0;
  in.rotary = arch.max_positions == 0 && arch.relative_attention_buckets == 0;
  in.causal = arch.lm_head;
  in.p_attn = arch.attn_dropout;
  in.p_resid = arch.resid_dropout;
  in.p_embd = arch.embd_dropout;
  if (t.dropout) {
    // Llama-style models have one dropout site (attention); the rest have all three.
    const bool all_sites = in.graph == LayerGraph::gpt2 || mt == "phi3" || mt == "t5";
    in.p_attn = *t.dropout;
    in.p_resid = all_sites ? *t.dropout : 0.0;
    in.p_embd = all_sites ? *t.dropout : 0.0;
  }
  const auto& p = run.precision;
  in.ex = width(p.param);
  in.ec = width(p.activation);
  in.amp = p.autocast;
  in.ew = p.working ? width(*p.working) : in.ec;
  in.cuda = t.device == Device::cuda;
  in.attention = t.attention;
  in.recompute = t.recompute;
  const bool measured = mt == "llama" || mt == "mistral" || mt == "qwen2" || mt == "gpt2";
  if (run.model.arch && !measured) {
    in.approximate = true;
    if (with_notes)
      in.notes.push_back(
          fmt::format("{}: activations follow the {} layer graph measured on {} (approximations in "
                      "docs/activations.md)",
                      mt, in.graph == LayerGraph::llama ? "Llama" : "GPT-2",
                      in.graph == LayerGraph::llama ? "Llama/Mistral/Qwen2" : "GPT-2"));
  }
  if (!known_act) {
    in.approximate = true;
    if (with_notes)
      in.notes.push_back(fmt::format(
          "activation function \"{}\": taken as saving its input and output, as gelu does",
          arch.activation));
  }
  return in;
}

ActivationBytes activation_bytes(const ActivationInputs& in, std::vector<ActivationTerm>* terms) {
  Sink out(terms);
  const bool llama = in.graph == LayerGraph::llama;
  const bool eager = in.attention == Attention::eager;
  const u64 b = in.b, s = in.s, h = in.h, a = in.a, ex = in.ex, ec = in.ec, ew = in.ew;
  const u64 N = product({b, s});
  const u64 Nh = product({N, h});
  const u64 Nad = product({N, a, in.d});
  const u64 Nav = product({N, a, in.dv});
  const u64 Nkd = product({N, in.k, in.d});
  const u64 S2 = product({b, a, s, s});
  const u64 NV = product({N, in.V});
  ActivationBytes r;
  LayerTerms& t = r.t;

  // ---- norms (one of them) ----
  const u64 eln = in.cuda ? 4 : ex;  // LayerNorm mean/rstd: CPU keeps the input dtype
  if (llama) {
    t.norm =
        out.add("layer", "RMSNorm: fp32 input (pow, mul), rsqrt, normed cast back",
                4 * Nh + 4 * N + ex * Nh, [&] {
                  return fmt::format("4*N*h + 4*N + {}*N*h = 4 x {} x {} + 4 x {} + {} x {} x {}",
                                     ex, N, h, N, ex, N, h);
                });
  } else {
    t.norm = out.add("layer", "LayerNorm: input, mean and rstd", ex * Nh + 2 * eln * N, [&] {
      return fmt::format("{}*N*h + 2*{}*N = {} x {} x {} + 2 x {} x {}", ex, eln, ex, N, h, eln, N);
    });
  }
  const u64 main_norms = std::min<u64>(in.norms, 2);
  if (main_norms == 2) {
    out.add("layer", "second norm (before the MLP), as the first", t.norm,
            [] { return std::string("as the first norm"); });
  }

  // ---- norm outputs feeding the matmuls ----
  const u64 q_casts = in.fused_qkv ? 1 : 3;
  const u64 m_casts = in.gated && !in.fused_gate_up ? 2 : 1;
  if (in.amp) {
    t.y_q = out.add(
        "layer", "attention input: autocast casts of the norm output, one per projection",
        q_casts * ew * Nh, [&] {
          return fmt::format("{} x {}*N*h = {} x {} x {} x {}", q_casts, ew, q_casts, ew, N, h);
        });
    t.y_m =
        out.add("layer", "MLP input: autocast casts of the norm output", m_casts * ew * Nh, [&] {
          return fmt::format("{} x {}*N*h = {} x {} x {} x {}", m_casts, ew, m_casts, ew, N, h);
        });
  } else {
    t.y_q = out.add("layer", "attention input (norm output)", ex * Nh,
                    [&] { return fmt::format("{}*N*h = {} x {} x {}", ex, ex, N, h); });
    if (main_norms == 2 || !in.parallel) {
      t.y_m = out.add("layer", "MLP input (norm output)", ex * Nh,
                      [&] { return fmt::format("{}*N*h = {} x {} x {}", ex, ex, N, h); });
    }
  }

  // ---- attention ----
  if (eager) {
    t.q = out.add("layer", "q (matmul operand copy)", ec * Nad,
                  [&] { return fmt::format("{}*N*a*d = {} x {} x {} x {}", ec, ec, N, a, in.d); });
    t.k = ec * Nad;
    t.v = ec * Nav;
    if (llama && in.k == 1 && b == 1) {
      // MQA with batch 1: repeat_kv is a stride-0 view bmm uses without copying.
      t.v = ec * N * in.dv;
      t.k = in.amp ? ec * Nad : ec * N * in.d;
    }
    out.add("layer", "k (repeated for GQA, matmul operand)", t.k,
            [&] { return fmt::format("{} bytes ({} B x N*heads*d)", t.k, ec); });
    out.add("layer", "v (repeated for GQA, matmul operand)", t.v,
            [&] { return fmt::format("{} bytes ({} B x N*heads*d_v)", t.v, ec); });
    t.sc = llama ? 8 : ec;
    const bool drop = in.p_attn > 0;
    if (llama) {
      t.sm = 4 * S2;  // softmax(dtype=float32)
      if (drop) {
        t.dmask = S2;
        t.dropped = ec * S2;
      } else if (ec != 4) {
        t.pc = ec * S2;
      }
    } else {
      const u64 e_sm = ec == 4 || (in.amp && in.cuda) ? 4 : ec;
      t.sm = e_sm * S2;
      if (drop) {
        t.dmask = S2;
        t.dropped = ec * S2;
      } else if (in.amp && in.cuda) {
        t.pc = ec * S2;  // .type(value.dtype) of the fp32 probabilities
      }
    }
    t.o_in = out.add("layer", "attention output (o_proj input)", ec * Nav, [&] {
      return fmt::format("{}*N*a*d_v = {} x {} x {} x {}", ec, ec, N, a, in.dv);
    });
    if (in.recompute == Recompute::selective) {
      // Korthikanti et al. 2022: the attention core is recomputed in backward, not stored.
      t.core = t.sc + t.sm + t.pc + t.dmask + t.dropped;
      t.sc = t.sm = t.pc = t.dmask = t.dropped = 0;
      out.note("layer", "selective recompute: attention core (scores, softmax, dropout) not stored",
               [&] { return fmt::format("0 (re-materialised in backward: {} B)", t.core); });
    }
    const u64 e_sm = t.sm / S2;
    out.add("layer",
            llama ? "scaling 1/sqrt(d) (wrapped Python float, float64)"
                  : "divisor sqrt(d) (0-d tensor)",
            t.sc, [&] { return fmt::format("{} B", t.sc); });
    out.add("layer", "softmax output (scores b*a*s*s)", t.sm,
            [&] { return fmt::format("{}*b*a*s^2 = {} x {} x {} x {}^2", e_sm, e_sm, b, a, s); });
    out.add("layer", "probabilities in the compute dtype (attn@V operand)", t.pc,
            [&] { return fmt::format("{}*b*a*s^2 = {} x {} x {} x {}^2", ec, ec, b, a, s); });
    out.add("layer", "attention dropout mask (bool)", t.dmask,
            [&] { return fmt::format("1*b*a*s^2 = {} x {} x {}^2", b, a, s); });
    out.add("layer", "attention dropout output (attn@V operand)", t.dropped,
            [&] { return fmt::format("{}*b*a*s^2 = {} x {} x {} x {}^2", ec, ec, b, a, s); });
  } else {
    // SDPA/flash keep their inputs, the output (shared with the o_proj input) and a
    // log-sum-exp per row (derivation §5.2).
    const bool flash = in.attention == Attention::flash;
    const u64 kv = flash && llama ? ec * Nkd : ec * Nad;
    t.q = out.add("layer", "q (kernel input)", ec * Nad,
                  [&] { return fmt::format("{}*N*a*d = {} x {} x {} x {}", ec, ec, N, a, in.d); });
    t.k = out.add("layer", flash ? "k (kernel input, not repeated)" : "k (kernel input, repeated)",
                  kv, [&] { return fmt::format("{} bytes", kv); });
    t.v = out.add("layer", flash ? "v (kernel input, not repeated)" : "v (kernel input, repeated)",
                  flash && llama ? ec * product({N, in.k, in.dv}) : ec * Nav,
                  [&] { return std::string("as k, with d_v"); });
    t.o_in = out.add("layer", "attention output = o_proj input (one storage)", ec * Nav, [&] {
      return fmt::format("{}*N*a*d_v = {} x {} x {} x {}", ec, ec, N, a, in.dv);
    });
    const u64 rows = flash ? s : ceil_div(s, 32) * 32;
    t.lse = out.add("layer", "log-sum-exp (fp32, one per row) + philox seed and offset",
                    4 * b * a * rows + 16, [&] {
                      return fmt::format("4*b*a*{} + 16 = 4 x {} x {} x {} + 16",
                                         flash ? "s" : "ceil32(s)", b, a, rows);
                    });
  }

  // ---- residual dropout masks ----
  if (in.p_resid > 0) {
    t.rmask = out.add("layer", "residual dropout mask after attention (bool)", Nh,
                      [&] { return fmt::format("1*N*h = {} x {}", N, h); });
    t.mmask = out.add("layer", "residual dropout mask after the MLP (bool)", Nh,
                      [&] { return fmt::format("1*N*h = {} x {}", N, h); });
  }

  // ---- extra norms ----
  if (in.norms > 2) {
    t.extra += out.add("layer", "extra norms (post-attention/post-MLP)", (in.norms - 2) * t.norm,
                       [&] { return fmt::format("{} x {}", in.norms - 2, t.norm); });
  }
  if (in.qk_norm) {
    const u64 qk = llama ? 2 * (4 * Nad + 4 * N * a + ex * Nad) : 2 * (ex * Nad + 2 * eln * N * a);
    t.extra += out.add("layer", "q and k norms", qk,
                       [&] { return fmt::format("2 norms over N*a*d: {}", qk); });
  }

  // ---- MLP ----
  const u64 dense = mlp_bytes(in, N, in.I);
  const auto mlp_formula = [&](u64 tokens, u64 w) {
    const u64 f = in.act == ActFn::gelu_new ? (in.amp && in.cuda ? 16 : 5 * ec)
                  : in.act == ActFn::relu   ? ec
                                            : 2 * ec;
    const u64 per = in.gated ? f + 2 * ec : f;
    const char* plus = in.act == ActFn::gelu_new ? " + 24" : "";
    return fmt::format(
        "{}*T*I{} = {} x {} x {}{} (T tokens = {}, I = {}; {}{})", per, plus, per, tokens, w, plus,
        tokens, w, act_label(in.act),
        in.gated ? fmt::format(", gated: activation {} + up and product {}", f, 2 * ec) : "");
  };
  u64 moe = 0;
  if (in.moe_layers > 0) {
    const u64 Nk = product({N, in.topk});
    moe = mlp_bytes(in, Nk, in.I_moe) + 2 * ec * product({Nk, h}) + 4 * product({N, in.experts}) +
          12 * Nk;
    if (in.I_shared > 0) moe += mlp_bytes(in, N, in.I_shared) + (in.shared_gate ? 2 * ec * N : 0);
  }
  if (in.moe_layers < in.L) {
    out.add("layer", in.moe_layers ? "dense MLP (dense layers)" : "MLP activation", dense,
            [&] { return mlp_formula(N, in.I); });
  }
  if (in.moe_layers > 0) {
    out.add("layer",
            "MoE MLP (MoE layers): top-k experts per token, gathered inputs and outputs, router "
            "softmax, weights and indices",
            moe, [&] {
              return fmt::format("experts {} + 2*{}*N*k*h + 4*N*E + 12*N*k{} (k = {}, E = {})",
                                 mlp_formula(N * in.topk, in.I_moe), ec,
                                 in.I_shared ? " + shared expert" : "", in.topk, in.experts);
            });
  }

  const u64 base = main_norms * t.norm + t.y_q + t.y_m + t.q + t.k + t.v + t.o_in + t.sc + t.sm +
                   t.pc + t.dmask + t.dropped + t.lse + t.rmask + t.mmask + t.extra;
  const u64 a_dense = base + dense;
  const u64 a_moe = base + moe;
  const u64 L_dense = in.L - in.moe_layers;
  t.mlp = in.moe_layers == in.L ? moe : (in.moe_layers ? std::max(dense, moe) : dense);
  r.full_layer = base + t.mlp;
  const bool full = in.recompute == Recompute::full;
  r.per_layer = full ? ex * Nh : r.full_layer;
  r.layers = full ? in.L * ex * Nh : L_dense * a_dense + in.moe_layers * a_moe;
  if (full) {
    out.add("layer", "full recompute: only the layer input is kept (as stored)", ex * Nh,
            [&] { return fmt::format("{}*N*h = {} x {} x {}", ex, ex, N, h); });
  }

  // ---- shared across layers ----
  if (in.rotary) {
    r.shared += out.add("shared", "rotary cos and sin", 2 * s * in.d * ex, [&] {
      return fmt::format("2*s*d*{} = 2 x {} x {} x {}", ex, s, in.d, ex);
    });
  }
  if (llama) {
    if (full && in.causal) {
      r.shared += out.add("shared", "additive causal mask (a checkpoint argument)", s * s * ex,
                          [&] { return fmt::format("s^2*{} = {}^2 x {}", ex, s, ex); });
    }
  } else if (in.causal && eager) {
    r.shared +=
        out.add("shared", "causal bool mask", s * s, [&] { return fmt::format("s^2 = {}^2", s); });
  }

  // ---- embeddings ----
  if (!llama && in.learned_positions) {
    r.embed += out.add("embed", "position ids (int64)", 8 * s,
                       [&] { return fmt::format("8*s = 8 x {}", s); });
  }
  if (in.embedding_norm) {
    r.embed +=
        out.add("embed", "embedding LayerNorm", t.norm, [&] { return fmt::format("{}", t.norm); });
  }
  if (in.p_embd > 0) {
    r.embed += out.add("embed", "embedding dropout mask (bool)", Nh,
                       [&] { return fmt::format("1*N*h = {} x {}", N, h); });
  }

  // ---- head: final norm, lm_head input, log-softmax, target ----
  r.target = b == 1 ? 8 * (s + 1) : 8 * N;
  if (in.final_norm)
    r.head += out.add("head", "final norm", t.norm, [] { return std::string("as a layer norm"); });
  if (in.lm_head) {
    const u64 y = in.amp ? ew * Nh : ex * Nh;
    r.head += out.add(
        "head", in.amp ? "lm_head input (autocast cast)" : "lm_head input (final norm output)", y,
        [&] { return fmt::format("{}*N*h = {} x {} x {}", y / Nh, y / Nh, N, h); });
    r.head += out.add("head", "log_softmax(logits.float()) (fp32 N x V)", 4 * NV,
                      [&] { return fmt::format("4*N*V = 4 x {} x {}", N, in.V); });
    r.head += out.add("head", "loss target (int64 shift_labels)", r.target, [&] {
      return b == 1 ? fmt::format("8*(s+1) = 8 x {} (batch 1: the padded labels)", s + 1)
                    : fmt::format("8*N = 8 x {}", N);
    });
    r.head += out.add("head", "total_weight (0-d fp32)", 4, [] { return std::string("4 B"); });
  }
  r.total = r.layers + r.shared + r.embed + r.head;
  return r;
}

}  // namespace memest
