// What each layer saves for backward, as named tensors: docs/activation-derivation.md §3
// (measured for Llama/Mistral/Qwen2 and GPT-2 on the CPU) with the CUDA, SDPA/flash and family
// generalisations of §5 and docs/activations.md. Sizes are shapes of symbols, so the bytes and
// the --explain formulas come from one expression.
#include "base/emplace_fields.hpp"
#include "step/monomial.hpp"
#include "step/rules/rules.hpp"
#include "step/step_build.hpp"

#include <memest/run_spec.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <array>
#include <cmath>

namespace memest::detail {
namespace {

class Saver {
 public:
  Saver(Step& step, const ActivationInputs& in)
      : step_(step),
        in_(in),
        dims_(in),
        tokens_(in.sp ? sym::Nt : sym::N),
        later_(flow(in.grads.embed || in.grads.layers)),
        first_(flow(in.grads.embed)) {}

  void all() {
    layer();
    mlp(Scope::dense_mlp, {sym::N}, dims_.I);
    if (in_.moe_layers > 0 && in_.moe_torchtitan) {
      torchtitan_moe();
    } else if (in_.moe_layers > 0 && in_.moe_a2a) {
      megatron_moe();
    } else if (in_.moe_layers > 0) {
      moe();
    }
    shared();
    embed();
    head();
    apply_saved_rules(step_, in_);
    count_layers();
    step_.walk_mlp = walk_mlp();
  }

 private:
  Step& step_;
  const ActivationInputs& in_;
  Dims dims_;
  Sym tokens_;  // the tokens of the replicated (or, under sequence parallelism, split) regions

  using Flow = LayerFlow;
  Flow later_, first_;  // the layers after the first, and the first
  bool skip_first_ = false;

  bool adapters_on(Slot sl) const {
    for (std::uint8_t i = 0; i < in_.grads.n_adapters; ++i)
      if (in_.grads.adapters[i].slot == sl) return true;
    return false;
  }
  // What requires grad in a layer whose input does (`input`) or not; the rules may add to
  // what the linears keep (bitsandbytes' 4-bit linears keeping their input).
  Flow flow(bool input) const {
    const GradFlow& g = in_.grads;
    // A LoRA adapter without dropout (and without autocast's or PEFT's cast) reads the base's
    // input itself.
    const bool plain = g.lora_dropout == 0 && !in_.amp && !upcast();
    Flow f;
    f.input = input;
    f.norm1 = input || g.norms;
    f.core = f.norm1 || g.qkv > 0 || adapters_on(Slot::q_in);
    f.qkv_keeps_input = g.qkv > 0 || (plain && adapters_on(Slot::q_in));
    f.o_keeps_input = g.o || (plain && adapters_on(Slot::o_in));
    f.attention_out = f.core || g.o || adapters_on(Slot::o_in);
    f.residual1 = input || f.attention_out;
    f.norm2 = in_.parallel ? f.norm1 : f.residual1 || g.norms;
    f.gate_out = f.norm2 || g.mlp_in > 0 || adapters_on(Slot::mlp_in);
    f.mlp_keeps_input = g.mlp_in > 0 || (plain && adapters_on(Slot::mlp_in));
    f.down_keeps_input = g.down || (plain && adapters_on(Slot::mlp));
    f.mlp_out = f.gate_out || g.down || adapters_on(Slot::mlp);
    apply_flow_rules(f, in_);
    return f;
  }
  // Whether the layers save a tensor kept under `cond`; marks the next one added as absent from
  // the first layer when only the later layers keep it.
  template <typename Cond>
  bool when(Cond&& cond) {
    const bool later = cond(later_);
    skip_first_ = later && !cond(first_);
    return later;
  }

  bool llama() const { return in_.graph == LayerGraph::llama; }
  // Adapters wider than the compute dtype outside autocast: each casts its own input up.
  bool upcast() const { return !in_.amp && in_.ea > in_.ec; }

  void add(std::string_view name, Scope sc, Slot sl, u64 width, const Shape& sh,
           Batch batch = Batch::any) {
    const std::uint32_t i = add_tensor(step_, name, Part::activations, sc, sl, width, sh, batch);
    const bool layer = sc == Scope::layer || sc == Scope::dense_mlp || sc == Scope::moe_mlp;
    step_.tensors[i].skips_first = layer && skip_first_;
  }
  // A shape with a leading count, left out when it is 1.
  static Shape counted(u64 n, const char* n_name, std::initializer_list<Sym> rest) {
    Shape sh;
    if (n != 1) sh.factors[sh.rank++] = dim(n_name, n);
    for (const Sym& f : rest) sh.factors[sh.rank++] = f;
    return sh;
  }

  // One norm over rows x width: RMSNorm keeps its fp32 input, the rsqrt and the normed output
  // cast back (§3.1 rows 1-3); LayerNorm its input, mean and rstd (§3.2; fp32 stats on CUDA).
  // `input` says whether the norm's input requires grad, `weight` whether its weight is trained:
  // RMSNorm keeps its fp32 input and rsqrt for the input's gradient and the normed output for
  // the weight's; LayerNorm's one backward keeps all of them for either.
  void norm(Scope sc, Slot sl, u64 n, const char* n_name, NormSite site, bool (*input)(const Flow&),
            bool weight) {
    const NormNames& names = norm_names(site);
    // q and k norms: over q's heads and k's (kv) heads, of the projections' output dtype.
    const bool qk = site == NormSite::qk;
    const Sym heads = dim("a+kv", in_.a + in_.k);
    const Shape full =
        qk ? shape({sym::N, heads, dims_.d}) : counted(n, n_name, {tokens_, dims_.h});
    const u64 e_in = qk ? in_.ec : in_.ex;
    if (llama()) {
      if (when(input)) {
        add(names.fp32_input, sc, sl, 4, full);
        add(names.rsqrt, sc, sl, 4, qk ? shape({sym::N, heads}) : counted(n, n_name, {tokens_}));
      }
      // Gemma's RMSNorm multiplies by (1 + weight) in fp32 and casts after: the product's
      // operands are the fp32 normalised input and an fp32 (1 + weight).
      const bool gemma = in_.norm_fp32_output;
      if (when([&](const Flow&) { return weight; }))
        add(names.output, sc, sl, gemma ? 4 : e_in, full);
      if (gemma && when(input))
        add(names.plus_one, sc, sl, 4,
            qk ? counted(2, "q and k", {dims_.d}) : counted(n, n_name, {dims_.h}));
    } else if (when([&](const Flow& f) { return weight || input(f); })) {
      const u64 eln = in_.cuda ? 4 : in_.ex;  // CPU keeps the statistics in the input dtype
      add(names.ln_input, sc, sl, e_in, full);
      add(names.ln_stats, sc, sl, eln,
          qk ? counted(2, "2 stats", {sym::N, heads}) : counted(2, "2 stats", {tokens_}));
    }
    skip_first_ = false;
  }

  void layer() {
    const u64 main_norms = std::min<u64>(in_.norms, 2);
    // One norm only (parallel blocks): the walk releases it with the MLP's input (§4.2).
    const bool w = in_.grads.norms;
    norm(
        Scope::layer, main_norms == 2 ? Slot::norm1 : Slot::norm2, 1, "", NormSite::input,
        [](const Flow& f) { return f.input; }, w);
    if (main_norms == 2) {
      norm(
          Scope::layer, Slot::norm2, 1, "", NormSite::post_attention,
          [](const Flow& f) { return f.residual1; }, w);
    }
    norm_outputs(main_norms);
    adapters();
    if (in_.attention == Attention::eager) {
      eager_attention();
    } else {
      kernel_attention();
    }
    if (in_.p_resid > 0 && when([](const Flow& f) { return f.attention_out; })) {
      add("residual dropout mask after attention (bool)", Scope::layer, Slot::rmask, 1,
          shape({tokens_, dims_.h}));
    }
    if (in_.p_resid > 0 && when([](const Flow& f) { return f.mlp_out; })) {
      add("residual dropout mask after the MLP (bool)", Scope::layer, Slot::mmask, 1,
          shape({tokens_, dims_.h}));
    }
    skip_first_ = false;
    if (in_.norms > 2) {
      norm(
          Scope::layer, Slot::extra, in_.norms - 2, "extra norms", NormSite::extra,
          [](const Flow& f) { return f.residual1; }, w);
    }
    if (in_.qk_norm)
      norm(
          Scope::layer, Slot::extra, 2, "q and k", NormSite::qk,
          [](const Flow& f) { return f.core; }, w);
  }

  // What each LoRA adapter keeps (PEFT and torchtune LoRA linears; LitGPT's fused one is a
  // rule, src/step/rules/litgpt_modules.cpp): with dropout its mask (when the input requires
  // grad) and the dropped input lora_A reads, under autocast lora_A's own cast of its input, and
  // the rank-r output of lora_A that lora_B's weight gradient reads. Without dropout or
  // autocast lora_A reads the base's input (norm_outputs).
  void adapters() {
    const GradFlow& g = in_.grads;
    for (std::uint8_t i = 0; i < g.n_adapters; ++i) {
      const AdapterSite& a = g.adapters[i];
      const LoraNames& names = lora_names(a.slot);
      const Shape in = shape({sym::N, dim("in", a.in)});
      // q/k/v and gate/up read the norm output (the model dtype), o_proj and down_proj a
      // matmul's output (the activation dtype).
      const bool normed = a.slot == Slot::q_in || a.slot == Slot::mlp_in;
      if (g.lora_dropout > 0 && when([&a](const Flow& f) { return input_requires_grad(a, f); }))
        add(names.mask, Scope::layer, a.slot, 1, in);
      skip_first_ = false;
      if (in_.amp) {
        add(names.cast, Scope::layer, a.slot, in_.ew, in);
      } else if (upcast()) {
        // PEFT's _cast_input_dtype: the input cast to the adapters' dtype, then the dropout.
        add(g.lora_dropout > 0 ? names.dropped : names.upcast, Scope::layer, a.slot, in_.ea, in);
      } else if (g.lora_dropout > 0) {
        add(names.dropped, Scope::layer, a.slot, normed ? in_.ex : in_.ec, in);
      }
      add(names.lora_a_out, Scope::layer, a.slot,
          in_.amp    ? in_.ew
          : upcast() ? in_.ea
                     : in_.ec,
          shape({sym::N, dim("r", a.rank)}));
    }
  }

  // Whether the input of an adapted linear requires grad.
  static bool input_requires_grad(const AdapterSite& a, const Flow& f) {
    switch (a.slot) {
      case Slot::q_in:
        return f.norm1;
      case Slot::o_in:
        return f.core;
      case Slot::mlp_in:
        return f.norm2;
      default:
        return f.gate_out;
    }
  }

  // The matmuls' inputs: the norm output, or under autocast its casts, one per projection.
  // A projection whose weight is frozen keeps no cast of its input.
  void norm_outputs(u64 main_norms) {
    const GradFlow& g = in_.grads;
    if (in_.amp) {
      const u64 q_casts = in_.fused_qkv ? std::min<u64>(1, g.qkv) : g.qkv;
      const u64 m_casts = in_.gated && !in_.fused_gate_up ? g.mlp_in : std::min<u64>(1, g.mlp_in);
      if (q_casts > 0) {
        add("attention input: autocast casts of the norm output", Scope::layer, Slot::q_in, in_.ew,
            counted(q_casts, "projections", {tokens_, dims_.h}));
      }
      if (m_casts > 0) {
        add("MLP input: autocast casts of the norm output", Scope::layer, Slot::mlp_in, in_.ew,
            counted(m_casts, "projections", {tokens_, dims_.h}));
      }
      return;
    }
    // Under sequence parallelism the linear saves its input before the all-gather.
    if (when([](const Flow& f) { return f.qkv_keeps_input; }))
      add("attention input (norm output)", Scope::layer, Slot::q_in, in_.ex,
          shape({tokens_, dims_.h}));
    if ((main_norms == 2 || !in_.parallel) &&
        when([](const Flow& f) { return f.mlp_keeps_input; })) {
      add("MLP input (norm output)", Scope::layer, Slot::mlp_in, in_.ex, shape({tokens_, dims_.h}));
    }
    skip_first_ = false;
  }

  // §3.1 rows 4-11 (Llama) and §3.2 (GPT-2): the matmul operands and the s x s scores.
  void eager_attention() {
    const u64 ec = in_.ec;
    if (when([](const Flow& f) { return f.core; })) eager_core();
    if (when([](const Flow& f) { return f.o_keeps_input; })) {
      add("attention output (o_proj input)", Scope::layer, Slot::o_in, ec,
          shape({sym::N, dims_.a, dims_.dv}));
    }
    skip_first_ = false;
  }

  // The eager core, kept when q, k or v requires grad (in the first layer of a model whose
  // frozen k_proj reads a frozen embedding, q@k^T would keep only k: counted as the others).
  void eager_core() {
    const u64 ec = in_.ec;
    add("q (matmul operand copy)", Scope::layer, Slot::q, ec, shape({sym::N, dims_.a, dims_.d}));
    if (llama() && in_.k == 1) {
      // MQA with batch 1: repeat_kv is a stride-0 view bmm uses without copying.
      add("k (repeated for GQA, matmul operand)", Scope::layer, Slot::k, ec,
          shape({sym::N, dims_.a, dims_.d}), in_.amp ? Batch::any : Batch::many);
      if (!in_.amp) {
        add("k (a stride-0 view at batch 1)", Scope::layer, Slot::k, ec, shape({sym::N, dims_.d}),
            Batch::one);
      }
      add("v (repeated for GQA, matmul operand)", Scope::layer, Slot::v, ec,
          shape({sym::N, dims_.a, dims_.dv}), Batch::many);
      add("v (a stride-0 view at batch 1)", Scope::layer, Slot::v, ec, shape({sym::N, dims_.dv}),
          Batch::one);
    } else {
      add("k (repeated for GQA, matmul operand)", Scope::layer, Slot::k, ec,
          shape({sym::N, dims_.a, dims_.d}));
      add("v (repeated for GQA, matmul operand)", Scope::layer, Slot::v, ec,
          shape({sym::N, dims_.a, dims_.dv}));
    }
    const Scope core = in_.recompute == Recompute::selective ? Scope::core : Scope::layer;
    add(llama() ? "scaling 1/sqrt(d) (wrapped Python float, float64)"
                : "divisor sqrt(d) (0-d tensor)",
        core, Slot::scale, llama() ? 8 : ec, shape({}));
    const Shape S2 = shape({sym::b, dims_.a, sym::s2});
    const bool drop = in_.p_attn > 0;
    const u64 e_sm = llama() || ec == 4 || (in_.amp && in_.cuda) ? 4 : ec;
    add(llama() ? "softmax output (softmax(dtype=float32))" : "softmax output", core, Slot::sm,
        e_sm, S2);
    if (drop) {
      add("attention dropout mask (bool)", core, Slot::dmask, 1, S2);
      add("attention dropout output (attn@V operand)", core, Slot::dropped, ec, S2);
    } else if (llama() ? ec != 4 : in_.amp && in_.cuda) {
      add("probabilities in the compute dtype (attn@V operand)", core, Slot::pc, ec, S2);
    }
  }

  // §5.2: SDPA/flash keep their inputs, the output (shared with the o_proj input) and a
  // log-sum-exp per row.
  void kernel_attention() {
    const u64 ec = in_.ec;
    const bool flash = in_.attention == Attention::flash;
    const bool grouped = flash;  // flash reads GQA k/v without repeating them
    // The kernel keeps its inputs and output when any input requires grad; o_proj keeps the
    // output (one storage) for its own weight gradient too.
    if (when([](const Flow& f) { return f.core || f.o_keeps_input; })) {
      add("attention output = o_proj input (one storage)", Scope::layer, Slot::o_in, ec,
          shape({sym::N, dims_.a, dims_.dv}));
    }
    skip_first_ = false;
    if (!when([](const Flow& f) { return f.core; })) return;
    add("q (kernel input)", Scope::layer, Slot::q, ec, shape({sym::N, dims_.a, dims_.d}));
    add(grouped ? "k (kernel input, not repeated)" : "k (kernel input, repeated)", Scope::layer,
        Slot::k, ec, shape({sym::N, grouped ? dims_.k : dims_.a, dims_.d}));
    add(grouped ? "v (kernel input, not repeated)" : "v (kernel input, repeated)", Scope::layer,
        Slot::v, ec, shape({sym::N, grouped ? dims_.k : dims_.a, dims_.dv}));
    add("log-sum-exp (fp32, one per row)", Scope::layer, Slot::lse, 4,
        shape({sym::b, dims_.a, flash ? sym::s : sym::s32}));
    add("philox seed and offset (int64)", Scope::layer, Slot::lse, 8, shape({dim("2", 2)}));
    skip_first_ = false;
  }

  // What an MLP of `width` saves for `tokens` tokens (§3.1 variants, §3.2, §5.1).
  void mlp(Scope sc, std::initializer_list<Sym> tokens, Sym width) {
    const u64 ec = in_.ec;
    Shape m = shape(tokens);
    m.factors[m.rank++] = width;
    // The MLP's first matmul outputs require grad (gate), its down projection reads the product
    // or activation output (down_in); the shared activation output of relu serves both.
    const auto gate = [](const Flow& f) { return f.gate_out; };
    const auto down_in = [](const Flow& f) { return f.down_keeps_input; };
    switch (in_.act) {
      case ActFn::gelu_new:
        // pow input, tanh, 0.5x, 1+tanh and the output; CUDA autocast runs pow/tanh in fp32.
        // Ungated, the output is c_proj's input, kept for c_proj's weight only.
        if (!in_.gated && !(in_.amp && in_.cuda) && when(down_in))
          add("gelu_new output (c_proj input)", sc, Slot::mlp, ec, m);
        if (!when(gate)) break;
        if (in_.amp && in_.cuda) {
          add("gelu_new: input, tanh, 0.5x, 1+tanh (fp32 under CUDA autocast)", sc, Slot::mlp, 4,
              prepend(dim("4", 4), m));
        } else if (in_.gated) {  // the output is act * up's operand, kept for up's gradient
          add("gelu_new: input, tanh, 0.5x, 1+tanh, output", sc, Slot::mlp, ec,
              prepend(dim("5", 5), m));
        } else {
          add("gelu_new: input, tanh, 0.5x, 1+tanh", sc, Slot::mlp, ec, prepend(dim("4", 4), m));
        }
        add("gelu_new: three float64 scalars", sc, Slot::mlp, 8, shape({dim("3", 3)}));
        break;
      case ActFn::silu:
      case ActFn::gelu:
        if (when(gate)) add("activation input (gate / fc output)", sc, Slot::mlp, ec, m);
        // Gated: mul keeps it for up's gradient; else the down projection for its weight.
        if (in_.gated ? when(gate) : when(down_in)) add("activation output", sc, Slot::mlp, ec, m);
        break;
      case ActFn::relu:
        if (when([](const Flow& f) { return f.gate_out || f.down_keeps_input; }))
          add("relu output (saved once for relu and the next matmul)", sc, Slot::mlp, ec, m);
        break;
    }
    if (in_.gated) {
      if (when(gate)) add("up projection output", sc, Slot::mlp, ec, m);
      if (when(down_in)) add("gate x up product (down_proj input)", sc, Slot::mlp, ec, m);
    }
    skip_first_ = false;
  }

  static Shape prepend(Sym count, const Shape& m) {
    Shape sh;
    sh.factors[sh.rank++] = count;
    for (std::uint8_t i = 0; i < m.rank; ++i) sh.factors[sh.rank++] = m.factors[i];
    return sh;
  }

  // An MoE layer: the routed experts on N*top_k tokens, the gathered inputs and outputs, the
  // router's fp32 softmax, the routing weights and indices, and any shared expert.
  void moe() {
    mlp(Scope::moe_mlp, {sym::N, dims_.topk}, dims_.Imoe);
    add("MoE: gathered expert inputs and outputs", Scope::moe_mlp, Slot::mlp, in_.ec,
        shape({dim("2", 2), sym::N, dims_.topk, dims_.h}));
    add("MoE: router probabilities (fp32)", Scope::moe_mlp, Slot::mlp, 4, shape({sym::N, dims_.E}));
    add("MoE: routing weights (fp32)", Scope::moe_mlp, Slot::mlp, 4, shape({sym::N, dims_.topk}));
    add("MoE: expert indices (int64)", Scope::moe_mlp, Slot::mlp, 8, shape({sym::N, dims_.topk}));
    if (in_.I_shared > 0) {
      mlp(Scope::moe_mlp, {sym::N}, dims_.Ishared);
      if (in_.shared_gate) {
        add("MoE: shared expert gate (logit and sigmoid)", Scope::moe_mlp, Slot::mlp, in_.ec,
            shape({dim("2", 2), sym::N}));
      }
    }
  }

  // Megatron-LM's MoE layer with the all-to-all dispatcher (megatron/core/transformer/moe/ at
  // @d98e8a64ddf3): the router's top_k over the logits keeps its indices and the softmax of the
  // top_k scores its fp32 output (moe_utils.py topk_routing_with_score_function; the N x E
  // logits are not kept); the dispatcher holds the routing map and the permutation's indices
  // (token_dispatcher.py dispatch_preprocess, moe_utils.py permute: index_select keeps the
  // index, not the tokens); the grouped experts keep fc1's input (the received rows), fc1's
  // output (the SwiGLU input, WeightedSwiGLUFunction in fusions/fused_bias_swiglu.py) with the
  // received probabilities, and fc2's input (experts.py TEGroupedMLP.forward).
  void megatron_moe() {
    const Scope sc = Scope::moe_mlp;
    const Sym k = dims_.topk;
    add("MoE router: top-k expert indices (int64)", sc, Slot::mlp, 8, shape({tokens_, k}));
    add("MoE router: softmax of the top-k scores (fp32)", sc, Slot::mlp, 4, shape({tokens_, k}));
    if (in_.moe_allgather) {
      allgather_dispatcher();
    } else {
      add("MoE dispatcher: routing map (bool)", sc, Slot::mlp, 1, shape({tokens_, dims_.E}));
      add("MoE dispatcher: token and probability permutation indices (int64)", sc, Slot::mlp, 8,
          shape({dim("2", 2), tokens_, k}));
    }
    const u64 ec = in_.ec;
    add("MoE experts: fc1 input (the rows received)", sc, Slot::mlp, ec,
        routed_rows(in_, dims_.h, "k*c*h"));
    const bool t = in_.t > 1;
    const char* i_rows = t ? "k*c*I_moe/t" : "k*c*I_moe";
    if (in_.gated) {
      add("MoE experts: fc1 output (SwiGLU input)", sc, Slot::mlp, ec,
          routed_rows(in_, dim(t ? "2*I_moe/t" : "2*I_moe", 2 * in_.I_moe),
                      t ? "k*c*2*I_moe/t" : "k*c*2*I_moe"));
    } else {
      add("MoE experts: fc1 output (activation input)", sc, Slot::mlp, ec,
          routed_rows(in_, dims_.Imoe, i_rows));
    }
    add("MoE experts: fc2 input (activation output)", sc, Slot::mlp, ec,
        routed_rows(in_, dims_.Imoe, i_rows));
    // In the logits' dtype, the router's input's (router.py gating: router_dtype = input.dtype
    // unless --moe-router-dtype; moe_utils.py topk_routing_with_score_function ends with
    // probs.type_as(logits)), as bytes a row so that a capacity factor's rows stay whole bytes.
    add("MoE experts: routing probabilities received (the logits' dtype)", sc, Slot::mlp, 1,
        routed_rows(in_, width_dim(ec), capacity_bytes_name(ec)));
    shared_expert();
  }

  void shared_expert() {
    if (in_.I_shared == 0) return;
    mlp(Scope::moe_mlp, {sym::N}, dims_.Ishared);
    if (in_.shared_gate) {
      add("MoE: shared expert gate (logit and sigmoid)", Scope::moe_mlp, Slot::mlp, in_.ec,
          shape({dim("2", 2), sym::N}));
    }
  }

  // A byte width as a dimension ("2"), and the per-token product of top_k, the capacity factor
  // and that width ("k*c*2"): names with static storage.
  static Sym width_dim(u64 w) {
    static constexpr std::array<const char*, 9> kNames = {"0", "1", "2", "3", "4",
                                                          "5", "6", "7", "8"};
    return dim(w < kNames.size() ? kNames.at(w) : "w", w);
  }
  static const char* capacity_bytes_name(u64 w) {
    switch (w) {
      case 1:
        return "k*c*1";
      case 2:
        return "k*c*2";
      case 4:
        return "k*c*4";
      default:
        return "k*c*w";
    }
  }

  // torchtitan's MoE layer (torchtitan @ b5bcd76c6, torchtitan/models/common/moe.py and
  // token_dispatcher.py): the router computes its gate under autocast to float32 and keeps the
  // fp32 softmax or sigmoid scores; the dispatcher sorts the N x k copies by expert
  // (LocalTokenDispatcher._local_reorder), under EP sends them all-to-all and reorders the
  // received rows expert-major (AllToAllTokenDispatcher._permute); GroupedExperts runs three
  // bf16 grouped matmuls with SiLU; combine multiplies the routed outputs in fp32 by their
  // scores and scatter_adds them back. The rows are not padded: bf16 grouped mm needs no
  // alignment (#2774, fe80b63cf); only the FP8/MXFP8 converters' TorchAOTokenDispatcher pads.
  void torchtitan_moe() {
    const Scope sc = Scope::moe_mlp;
    const Sym k = dims_.topk;
    torchtitan_router();
    // _local_reorder: argsort's indices kept by the scores' index, their // top_k kept by the
    // tokens' index and by combine's scatter_add; _permute's indices by the rows' index.
    add("MoE dispatch: argsort of the expert indices (int64)", sc, Slot::mlp, 8,
        shape({sym::N, k}));
    add("MoE dispatch: token indices in expert order (int64)", sc, Slot::mlp, 8,
        shape({sym::N, k}));
    if (in_.ep > 1) {
      add("MoE dispatch: expert-major permutation of the rows received (int64)", sc, Slot::mlp, 1,
          routed_rows(in_, dim("8", 8), "k*c*8"));
    }
    torchtitan_experts();
    // combine: (routed_output.to(float32) * scores).to(dtype): the multiply keeps both.
    add("MoE combine: routed outputs in fp32 (kept by the scores' multiply)", sc, Slot::mlp, 4,
        shape({sym::N, k, dims_.h}));
    add("MoE combine: scores in expert order (fp32)", sc, Slot::mlp, 4, shape({sym::N, k}));
    shared_expert();
  }

  // TokenChoiceTopKRouter.forward: the gate under torch.autocast(dtype=torch.float32) keeps
  // fp32 copies of its input and weight where they are not fp32 already; softmax or sigmoid
  // keeps its fp32 output; topk and gather keep the indices.
  void torchtitan_router() {
    const Scope sc = Scope::moe_mlp;
    if (in_.ec != 4) {
      add("MoE router: gate input in fp32 (autocast to float32)", sc, Slot::mlp, 4,
          shape({sym::N, dims_.h}));
    }
    if (in_.ex != 4) {
      add("MoE router: gate weight in fp32 (autocast to float32)", sc, Slot::mlp, 4,
          shape({dims_.E, dims_.h}));
    }
    add("MoE router: scores (fp32 softmax or sigmoid output)", sc, Slot::mlp, 4,
        shape({sym::N, dims_.E}));
    add("MoE router: top-k expert indices (int64)", sc, Slot::mlp, 8, shape({sym::N, dims_.topk}));
  }

  // GroupedExperts.forward: silu(x @ w1) * (x @ w3) @ w2, each a torch._grouped_mm on
  // x.bfloat16() and w.bfloat16(): bf16 whatever the run's dtype. The matmuls keep x, their
  // weights and the product; silu its input; the multiply both factors.
  void torchtitan_experts() {
    const Scope sc = Scope::moe_mlp;
    const bool t = in_.t > 1;
    const char* i_rows = t ? "k*c*I_moe/t" : "k*c*I_moe";
    add("MoE experts: grouped mm input (bf16 rows)", sc, Slot::mlp, 2,
        routed_rows(in_, dims_.h, "k*c*h"));
    add("MoE experts: w1 output (silu input)", sc, Slot::mlp, 2,
        routed_rows(in_, dims_.Imoe, i_rows));
    add("MoE experts: silu output", sc, Slot::mlp, 2, routed_rows(in_, dims_.Imoe, i_rows));
    add("MoE experts: w3 output", sc, Slot::mlp, 2, routed_rows(in_, dims_.Imoe, i_rows));
    add("MoE experts: silu x w3 (w2 input)", sc, Slot::mlp, 2,
        routed_rows(in_, dims_.Imoe, i_rows));
    if (in_.ex != 2) {  // w.bfloat16() copies weights of another dtype
      add("MoE experts: bf16 copies of the rank's expert weights", sc, Slot::mlp, 2,
          shape({dim("3", 3), dim("E/e", in_.experts / std::max<u64>(in_.ep, 1)), dims_.Imoe,
                 dims_.h}));
    }
  }

  // Megatron-LM's all-gather dispatcher (token_dispatcher.py @ d98e8a64ddf3,
  // MoEAllGatherTokenDispatcher): the routing map gathered over the TP x EP group, N x e tokens
  // (N/t x t x e), and its columns of this rank's E/e experts copied out (local_map, an attribute
  // the dispatcher keeps until the layer's next forward); the probabilities picked with
  // local_probs.T.contiguous().masked_select(local_map.T.contiguous()), whose backward keeps that
  // transposed mask; moe_utils.py permute (unfused, the default) keeps index_select's index, the
  // rows' sorted_indices. Both masks are N x e x E/e = N x E bools.
  void allgather_dispatcher() {
    const Scope sc = Scope::moe_mlp;
    add("MoE dispatcher: local routing map (bool, local_map)", sc, Slot::mlp, 1,
        shape({sym::N, dims_.E}));
    add("MoE dispatcher: transposed local routing map (bool, masked_select's mask)", sc, Slot::mlp,
        1, shape({sym::N, dims_.E}));
    add("MoE dispatcher: permutation indices of the rows kept (int64)", sc, Slot::mlp, 1,
        routed_rows(in_, dim("8", 8), "k*c*8"));
  }

  void shared() {
    const bool full = checkpointed(in_.recompute);
    if (in_.rotary && later_.core) {  // kept by q*cos and k*cos when q or k requires grad
      add("rotary cos and sin", Scope::shared, Slot::none, in_.ex,
          shape({dim("2", 2), sym::s, dims_.d}));
    }
    if (llama()) {
      // Only eager attention gets a materialised mask: for SDPA and flash without padding
      // transformers passes none and sets is_causal (_ignore_causal_mask_sdpa; masking_utils's
      // sdpa_mask; measured on an H200, tests/data/truth_cuda).
      if (full && in_.causal && in_.attention == Attention::eager) {
        add("additive causal mask (a checkpoint argument)", Scope::shared, Slot::none, in_.ex,
            shape({sym::s2}));
      }
    } else if (in_.causal && in_.attention == Attention::eager) {
      add("causal bool mask", Scope::shared, Slot::none, 1, shape({sym::s2}));
    }
    if (full) {
      add("layer input (kept by full recompute)", Scope::checkpoint, Slot::none, in_.ex,
          shape({tokens_, dims_.h}));
    }
  }

  void embed() {
    // A frozen embedding's output does not require grad: nothing after it is kept for it.
    const bool trained = in_.grads.embed;
    if (!llama() && in_.learned_positions && trained) {
      add("position ids (int64)", Scope::embed, Slot::none, 8, shape({sym::s}));
    }
    if (in_.embedding_norm) {
      norm(
          Scope::embed, Slot::none, 1, "", NormSite::embedding, [](const Flow&) { return false; },
          trained);
    }
    if (in_.p_embd > 0 && trained) {
      add("embedding dropout mask (bool)", Scope::embed, Slot::none, 1, shape({tokens_, dims_.h}));
    }
  }

  // Final norm and lm_head input (§3.1 head rows); the loss's tensors are a rule's
  // (src/step/rules/loss.cpp). The last layer's output requires grad when anything before it
  // is trained (later_.input); a frozen lm_head keeps no input.
  void head() {
    const GradFlow& g = in_.grads;
    if (in_.final_norm) {
      norm(
          Scope::head, Slot::none, 1, "", NormSite::final, [](const Flow& f) { return f.input; },
          g.final_norm);
    }
    if (in_.lm_head && g.head) {
      add(in_.amp ? "lm_head input (autocast cast)" : "lm_head input (final norm output)",
          Scope::head, Slot::none, in_.amp ? in_.ew : in_.ex, shape({tokens_, dims_.h}));
    }
  }

  // The MLP the walk's layers carry: the MoE one when every layer is MoE, else the larger
  // (per token) of the dense and the MoE one.
  Scope walk_mlp() const {
    if (in_.moe_layers == 0) return Scope::dense_mlp;
    if (in_.moe_layers == in_.L) return Scope::moe_mlp;
    Poly dense, moe;
    for (const auto& t : step_.tensors) {
      if (t.scope == Scope::dense_mlp) dense.add(t.bytes);
      if (t.scope == Scope::moe_mlp) moe.add(t.bytes);
    }
    if (moe.c[kMonoBS] != dense.c[kMonoBS])
      return moe.c[kMonoBS] > dense.c[kMonoBS] ? Scope::moe_mlp : Scope::dense_mlp;
    return moe.c[0] >= dense.c[0] ? Scope::moe_mlp : Scope::dense_mlp;
  }

  // Step::saved: what the forward pass leaves saved, each tensor with its number of copies.
  void count_layers() {
    const u64 L = in_.L;
    const bool full = checkpointed(in_.recompute);
    const u64 moe_layers = in_.moe_layers, dense_layers = L - moe_layers;
    step_.saved.reserve(step_.tensors.size());
    for (std::uint32_t i = 0; i < step_.tensors.size(); ++i) {
      const Tensor& t = step_.tensors[i];
      if (t.part != Part::activations) continue;
      u64 n = 0;
      const u64 skip = t.skips_first ? 1 : 0;  // the first layer does not keep it
      switch (t.scope) {
        case Scope::layer:
          n = full ? 0 : L - skip;
          break;
        case Scope::checkpoint:
          n = L;
          break;
        case Scope::dense_mlp:
          n = full || dense_layers == 0 ? 0 : dense_layers - skip;
          break;
        case Scope::moe_mlp:
          n = full || moe_layers == 0 ? 0 : moe_layers - (dense_layers == 0 ? skip : 0);
          break;
        case Scope::shared:
        case Scope::embed:
        case Scope::head:
          n = 1;
          break;
        default:
          break;
      }
      if (n > 0) step_.saved.push_back({i, 1, n});
    }
  }
};

}  // namespace

Shape routed_rows(const ActivationInputs& in, Sym per_row, const char* capacity_name) {
  if (in.moe_capacity > 0) {
    const double kc = static_cast<double>(in.topk) * in.moe_capacity;
    const auto n = static_cast<u64>(std::ceil(kc * static_cast<double>(per_row.value) - 1e-9));
    return shape({sym::N, dim(capacity_name, n)});
  }
  Sym rows = dim("top_k", in.topk);
  if (in.moe_worst) {
    const u64 local = in.experts / std::max<u64>(in.ep, 1);
    rows = dim("e*min(top_k,E/e)", checked_mul(in.ep, std::min(in.topk, local)));
  }
  return shape({sym::N, rows, per_row});
}

namespace {

// Sizes a tensor whose bytes are still zero (a new Tensor's).
// `shape` is the tensor's shape where it was built: add_tensor reads the caller's, not the copy
// just written into the record, so sizing need not wait for that copy's stores.
void size_new_tensor(Tensor& t, const Shape& shape) {
  if (const Monomial m = single_monomial(shape); m.index >= 0) {  // most tensors
    const auto i = static_cast<std::size_t>(m.index);
    t.bytes.c[i] = checked_mul(m.coef, t.width);
    t.mono = t.bytes.c[i] != 0 ? m.index : -1;
    return;
  }
  t.bytes.add(shape.elements(), t.width);
  int nonzero = 0;
  for (std::size_t i = 0; i < kMonoCount; ++i) {
    if (t.bytes.c[i] == 0) continue;
    t.mono = static_cast<int>(i);
    ++nonzero;
  }
  if (nonzero != 1) t.mono = -1;
}

}  // namespace

void size_tensor(Tensor& t) {
  t.bytes = Poly{};
  size_new_tensor(t, t.shape);
}

Tensor make_tensor(const Tensor& proto) {
  Tensor t = proto;
  size_tensor(t);
  return t;
}

Tensor make_tensor(std::string_view name, Part part, Scope scope, Slot slot, std::uint64_t width,
                   const Shape& shape, Batch batch) {
  return make_tensor(Tensor{.name = name,
                            .part = part,
                            .scope = scope,
                            .slot = slot,
                            .width = width,
                            .batch = batch,
                            .shape = shape});
}

std::uint32_t add_tensor(Step& step, std::string_view name, Part part, Scope scope, Slot slot,
                         std::uint64_t width, const Shape& shape, Batch batch) {
  // Built in place from its fields: the record's shape is not zeroed before the shape is copied
  // in. Its bytes are zero until sized.
  Tensor& t = emplace_fields(step.tensors, name, part, scope, slot, width, Poly{}, batch, false,
                             Stream::compute, -1, shape);
  size_new_tensor(t, shape);  // its bytes are zero
  return static_cast<std::uint32_t>(step.tensors.size() - 1);
}

std::uint32_t add_tensor(Step& step, const Tensor& proto) {
  step.tensors.push_back(proto);
  size_tensor(step.tensors.back());
  return static_cast<std::uint32_t>(step.tensors.size() - 1);
}

std::uint32_t add_constant(Step& step, std::string_view name, Part part, Scope scope,
                           std::uint64_t bytes) {
  Tensor& t = step.tensors.emplace_back();  // an empty shape: one monomial, 1, of coefficient 1
  t.name = name;
  t.part = part;
  t.scope = scope;
  t.width = bytes;
  t.bytes.c[0] = bytes;
  t.mono = bytes != 0 ? 0 : -1;
  return static_cast<std::uint32_t>(step.tensors.size() - 1);
}

const NormNames& norm_names(NormSite site) {
  static constexpr std::array<NormNames, 6> kNames = {{
      {"input RMSNorm: fp32 input (pow, mul)", "input RMSNorm: rsqrt (fp32, one per row)",
       "input RMSNorm: output cast back", "input LayerNorm: input",
       "input LayerNorm: mean and rstd", "input RMSNorm: 1 + weight (fp32)"},
      {"post-attention RMSNorm: fp32 input", "post-attention RMSNorm: rsqrt",
       "post-attention RMSNorm: output cast back", "post-attention LayerNorm: input",
       "post-attention LayerNorm: mean and rstd", "post-attention RMSNorm: 1 + weight (fp32)"},
      {"extra norms: fp32 input", "extra norms: rsqrt", "extra norms: output cast back",
       "extra norms: input", "extra norms: mean and rstd", "extra norms: 1 + weight (fp32)"},
      {"q and k norms: fp32 input", "q and k norms: rsqrt", "q and k norms: output cast back",
       "q and k norms: input", "q and k norms: mean and rstd", "q and k norms: 1 + weight (fp32)"},
      {"embedding norm: fp32 input", "embedding norm: rsqrt", "embedding norm: output",
       "embedding LayerNorm: input", "embedding LayerNorm: mean and rstd",
       "embedding norm: 1 + weight (fp32)"},
      {"final RMSNorm: fp32 input", "final RMSNorm: rsqrt", "final RMSNorm: output cast back",
       "final LayerNorm: input", "final LayerNorm: mean and rstd",
       "final RMSNorm: 1 + weight (fp32)"},
  }};
  return kNames[static_cast<std::size_t>(site)];
}

namespace {

constexpr std::array<LoraNames, 4> kLoraNames = {{
    {"LoRA on q/k/v: dropout mask (bool)", "LoRA on q/k/v: dropped input (lora_A input)",
     "LoRA on q/k/v: autocast cast of its input (lora_A input)",
     "LoRA on q/k/v: lora_A output (rank r, lora_B input)",
     "LoRA on q/k/v: its input in the adapters' dtype (PEFT's cast; lora_A input)"},
    {"LoRA on o_proj: dropout mask (bool)", "LoRA on o_proj: dropped input (lora_A input)",
     "LoRA on o_proj: autocast cast of its input (lora_A input)",
     "LoRA on o_proj: lora_A output (rank r, lora_B input)",
     "LoRA on o_proj: its input in the adapters' dtype (PEFT's cast; lora_A input)"},
    {"LoRA on gate/up: dropout mask (bool)", "LoRA on gate/up: dropped input (lora_A input)",
     "LoRA on gate/up: autocast cast of its input (lora_A input)",
     "LoRA on gate/up: lora_A output (rank r, lora_B input)",
     "LoRA on gate/up: its input in the adapters' dtype (PEFT's cast; lora_A input)"},
    {"LoRA on down_proj: dropout mask (bool)", "LoRA on down_proj: dropped input (lora_A input)",
     "LoRA on down_proj: autocast cast of its input (lora_A input)",
     "LoRA on down_proj: lora_A output (rank r, lora_B input)",
     "LoRA on down_proj: its input in the adapters' dtype (PEFT's cast; lora_A input)"},
}};

}  // namespace

const LoraNames& lora_names(Slot site) {
  switch (site) {
    case Slot::q_in:
      return kLoraNames[0];
    case Slot::o_in:
      return kLoraNames[1];
    case Slot::mlp_in:
      return kLoraNames[2];
    default:
      return kLoraNames[3];
  }
}

bool is_lora_tensor(const Tensor& t) {
  for (const LoraNames& n : kLoraNames) {
    if (t.name == n.mask || t.name == n.dropped || t.name == n.cast || t.name == n.lora_a_out ||
        t.name == n.upcast)
      return true;
  }
  return false;
}

void add_saved_tensors(Step& step, const ActivationInputs& in) { Saver(step, in).all(); }

namespace {

// A term built in the list from its fields.
void add_term(std::vector<ActivationTerm>& terms, const Tensor& t, u64 each, u64 count) {
  emplace_fields(terms, t.scope, t.name, each, count, t.width, t.shape);
}

}  // namespace

ActivationBytes saved_bytes(const Step& step, const ActivationInputs& in, const Basis& x,
                            const TensorBytes& bytes, Terms terms) {
  ActivationBytes r;
  r.b = x[kMonoB];
  r.s = x[kMonoS];
  r.t = token_split(in);
  r.h = in.h;
  r.a = in.a;
  r.k = in.k;
  r.d = in.d;
  r.I = in.I;
  r.V = in.V;
  r.L = in.L;
  const bool full = checkpointed(in.recompute);
  const auto recomputed = [&](const Tensor& t) {
    return t.scope == Scope::core ||
           (full && (t.scope == Scope::layer || t.scope == step.walk_mlp));
  };
  std::size_t n_recomputed = 0;
  for (std::uint32_t i = 0; i < step.tensors.size(); ++i) {
    const Tensor& t = step.tensors[i];
    if (t.part != Part::activations || !t.exists_at(x)) continue;
    const u64 v = bytes[i];
    if (t.scope == Scope::layer) r.full_layer += v;
    if (t.scope == step.walk_mlp) r.mlp += v;
    if (t.scope == Scope::checkpoint) r.per_layer += v;
    if (t.slot == Slot::target && t.width == 8) r.target = v;
    if (recomputed(t)) ++n_recomputed;
  }
  r.full_layer += r.mlp;
  if (!full) r.per_layer = r.full_layer;
  const bool listed = terms == Terms::listed;
  if (listed) r.terms.reserve(step.saved.size() + n_recomputed);
  for (const Entry& e : step.saved) {  // summed, and listed in the same pass
    const Tensor& t = step.tensors[e.tensor];
    if (!t.exists_at(x)) continue;
    const u64 each = bytes[e.tensor];
    u64& sum = t.scope == Scope::shared  ? r.shared
               : t.scope == Scope::embed ? r.embed
               : t.scope == Scope::head  ? r.head
                                         : r.layers;
    sum = checked_add(sum, checked_mul(each, e.count));
    if (listed) add_term(r.terms, t, each, e.count);
  }
  r.total = checked_add(checked_add(r.layers, r.shared), checked_add(r.embed, r.head));
  if (!listed) return r;
  for (std::uint32_t i = 0; i < step.tensors.size() && n_recomputed > 0; ++i) {  // not stored
    const Tensor& t = step.tensors[i];
    if (t.part == Part::activations && recomputed(t) && t.exists_at(x))
      add_term(r.terms, t, bytes[i], 0);
  }
  return r;
}

}  // namespace memest::detail
