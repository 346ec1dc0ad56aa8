// The peak over a training step: a port of docs/activation-derivation.md §4 (exact on the
// measured CPU steps) with the CUDA, flash, recompute and grad-persistence generalisations of
// docs/activations.md. Numbers only: the report names the moments.
#include <memest/estimate.hpp>
#include <memest/parallel.hpp>
#include <memest/peak.hpp>
#include <memest/units.hpp>

#include <algorithm>
#include <array>

namespace memest {
namespace {

using u64 = std::uint64_t;

constexpr std::array<std::string_view, kPartCount> kPartNames = {
    "params",      "master_params", "optimizer_state", "grads",   "master_grads", "grad_accum",
    "activations", "param_casts",   "inputs",          "buffers", "other"};

u64 width(Dtype d) { return std::max<u64>(1, bits(d) / 8); }

constexpr u64 kMiB = u64{1} << 20;
constexpr u64 kSmallSize = kMiB;        // requests up to 1 MiB use the small pool
constexpr u64 kSmallBuffer = 2 * kMiB;  // small-pool segments
constexpr u64 kMinLargeAlloc = 10 * kMiB;
constexpr u64 kLargeBuffer = 20 * kMiB;  // segments for requests in (1 MiB, 10 MiB)
constexpr u64 kRoundLarge = 2 * kMiB;    // larger requests get their own segment

u64 round_up(u64 x, u64 m) { return ceil_div(x, m) * m; }

// Blocks of one part, by pool: rounded sizes, and the segment bytes of the large ones.
struct Pool {
  u64 raw = 0, small = 0, mid = 0, large = 0, large_seg = 0;
  void add(u64 bytes, u64 count) {
    if (bytes == 0 || count == 0) return;
    const u64 r = cuda_block_size(bytes);
    raw += bytes * count;
    if (r <= kSmallSize) {
      small += r * count;
    } else if (r < kMinLargeAlloc) {
      mid += r * count;
    } else {
      large += r * count;
      large_seg += round_up(r, kRoundLarge) * count;
    }
  }
};

// The parameter layout the walk needs: per-layer sums and the order of the trainable tensors.
struct Layout {
  const Inventory* inv = nullptr;
  u64 L = 1;
  u64 params = 0, trainable = 0, trainable_tensors = 0;
  u64 mm_all = 0;   // matmul weights autocast copies (not QLoRA-stored ones)
  u64 bias_mm = 0;  // biases of matmul modules (cached by autocast during forward)
  u64 layer_trainable = 0, l_mlp = 0, l_down = 0, l_n2 = 0, l_o = 0, l_mm = 0, l_mm_mlp = 0,
      l_mm_o = 0, l_qkv = 0;
  u64 head_trainable = 0;  // groups after the layers (final norm, lm_head, pooler)
  u64 norms_per_layer = 2;

  bool per_layer(const TensorGroup& g) const {
    return L > 1 && g.name.find('*') != std::string::npos && g.count % L == 0;
  }
};

Layout layout(const Inventory& inv, u64 layers, u64 norms_per_layer) {
  Layout l;
  l.inv = &inv;
  l.L = std::max<u64>(1, layers);
  l.norms_per_layer = std::max<u64>(1, norms_per_layer);
  bool seen_block = false;
  u64 layer_norms = 0;
  for (const auto& g : inv.groups) {
    if (g.quant_state) continue;
    const u64 n = g.elements();
    l.params += n;
    if (g.trainable) {
      l.trainable += n;
      l.trainable_tensors += g.count;
    }
    const bool bias = g.rows == 1 && !g.kind.empty();
    if (g.matmul && !g.storage) l.mm_all += n;
    if (bias) l.bias_mm += n;
    if (l.per_layer(g)) {
      seen_block = true;
      const u64 per = n / l.L;
      if (g.trainable) l.layer_trainable += per;
      const bool mlp = g.role == Role::mlp || g.role == Role::expert || g.role == Role::router;
      if (mlp) l.l_mlp += per;
      if (g.kind == "down") l.l_down += per / std::max<u64>(1, g.count / l.L);
      if (g.kind == "o") l.l_o += per;
      if (g.role == Role::norm) layer_norms += per;
      if (g.matmul) {
        l.l_mm += per;
        if (mlp) l.l_mm_mlp += per;
        if (g.kind == "o") l.l_mm_o += per;
        if (g.kind == "q" || g.kind == "k" || g.kind == "v" || g.kind == "qkv" || g.kind == "kv")
          l.l_qkv += per;
      }
    } else if (seen_block && g.trainable) {
      l.head_trainable += n;
    }
  }
  l.l_n2 = layer_norms / l.norms_per_layer;
  return l;
}

// Visits the trainable tensors in parameters() order: f(previous elements, elements, prefix
// through this tensor), once per distinct position (the last layer for per-layer groups, which
// has the largest prefix), plus the layer wrap-around pair.
template <typename F>
void walk_order(const Layout& l, F&& f) {
  u64 pre_total = 0, block_total = 0;
  bool seen_block = false;
  for (const auto& g : l.inv->groups) {
    if (g.quant_state || !g.trainable) continue;
    if (l.per_layer(g)) {
      seen_block = true;
      block_total += g.elements() / l.L;
    } else if (!seen_block) {
      pre_total += g.elements();
    }
  }
  u64 prefix = 0, prev = 0, block_first = 0, block_last = 0;
  bool in_block = false, after_block = false;
  for (const auto& g : l.inv->groups) {
    if (g.quant_state || !g.trainable) continue;
    const u64 n = g.tensor_elements();
    const bool pl = l.per_layer(g);
    if (pl && !in_block) {
      in_block = true;
      prefix = pre_total + (l.L - 1) * block_total;  // position in the last layer
      block_first = n;
    }
    if (!pl && in_block && !after_block) {
      after_block = true;
      if (l.L > 1) f(block_last, block_first, 0);
      prefix = pre_total + l.L * block_total;
    }
    const u64 copies = pl ? g.count / l.L : g.count;
    f(prev, n, prefix + n);
    if (copies > 1) f(n, n, prefix + copies * n);
    prefix += copies * n;
    prev = n;
    if (pl) block_last = n;
  }
  if (in_block && !after_block && l.L > 1) f(block_last, block_first, 0);
}

struct Statics {
  u64 params = 0, master = 0, states = 0, steps = 0, grads = 0, grad_accum = 0, casts_all = 0;
  bool steps_on_device = false;
};

// States per trainable element for the optimizers whose state is elementwise.
u64 state_bytes(const OptimizerSpec& o, const Inventory& inv, u64 trainable, Dtype d) {
  u64 n = 0;
  switch (o.kind) {
    case OptimizerKind::sgd:
      return 0;
    case OptimizerKind::sgd_momentum:
    case OptimizerKind::adagrad:
    case OptimizerKind::lion:
      n = 1;
      break;
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      n = o.amsgrad ? 3 : 2;
      break;
    case OptimizerKind::rmsprop:
      n = 1 + (o.momentum ? u64{1} : 0) + (o.centered ? u64{1} : 0);
      break;
    case OptimizerKind::adafactor:
    case OptimizerKind::adam8bit:
      return optimizer_bytes(o, inv, d).state_bytes;
  }
  return checked_mul(n * width(d), trainable);
}

bool keeps_step(OptimizerKind k) {
  return k == OptimizerKind::adam || k == OptimizerKind::adamw || k == OptimizerKind::adagrad ||
         k == OptimizerKind::rmsprop;
}

const Inventory& canonical_inventory(u64 params) {
  // Searches over batch and sequence call this with one count many times.
  thread_local u64 cached_params = 0;
  thread_local Inventory cached;
  if (cached_params != params || cached.groups.empty()) {
    cached = build_inventory(canonical_architecture(params));
    cached_params = params;
  }
  return cached;
}

void finish(Moment& m) {
  u64 known = 0;
  for (std::size_t i = 0; i + 1 < kPartCount; ++i) known += m.parts[i];
  if (known > m.bytes) {  // a freed term taken from the activations' share
    const auto act = static_cast<std::size_t>(Part::activations);
    const u64 over = std::min(known - m.bytes, m.parts[act]);
    m.parts[act] -= over;
    known -= over;
  }
  m.parts[static_cast<std::size_t>(Part::other)] = m.bytes > known ? m.bytes - known : 0;
}

std::size_t idx(Part p) { return static_cast<std::size_t>(p); }

struct Walk {
  const RunSpec& run;
  const ActivationInputs& in;
  const ActivationBytes& act;
  const Layout& lay;
  Statics st;
};

// The moments of one step; `steady` false gives the first step (no optimizer state before the
// optimizer phase, no gradients kept from an earlier step).
std::vector<Moment> moments(const Walk& w, bool steady) {
  const auto& in = w.in;
  const auto& A = w.act;
  const auto& T = A.t;
  const auto& lp = w.lay;
  const auto& p = w.run.precision;
  const auto& tr = w.run.training;
  const Statics& st = w.st;
  const u64 b = in.b, s = in.s, h = in.h, L = in.L, V = in.V, a = in.a, d = in.d;
  const u64 N = b * s, Nh = N * h, Nad = N * a * d, S2 = b * a * s * s, NV = N * V;
  const u64 NI = in.moe_layers == in.L && in.moe_layers ? N * in.topk * in.I_moe : N * in.I;
  const u64 I = in.moe_layers == in.L && in.moe_layers ? in.I_moe : in.I;
  const u64 ex = in.ex, ec = in.ec, ew = in.ew;
  const u64 eg = width(p.grad), es = width(p.state);
  const bool amp = in.amp, cuda = in.cuda, llama = in.graph == LayerGraph::llama;
  const bool ck = in.recompute == Recompute::full, eager = in.attention == Attention::eager;
  const bool pa = in.p_attn > 0;
  const bool grads_live =
      (steady && !tr.grads_set_to_none) || tr.grad_accum > 1;  // kept, or accumulating
  const u64 G = st.grads;
  const bool copy_grads = p.master && width(p.grad) < width(*p.master);
  const u64 em = p.master ? width(*p.master) : 4;
  const u64 Gopt = copy_grads ? em * lp.trainable : G;

  // Baseline: what exists when the step starts.
  std::array<u64, kPartCount> base{};
  base[idx(Part::params)] = st.params;
  base[idx(Part::master_params)] = st.master;
  base[idx(Part::optimizer_state)] = st.states + (st.steps_on_device ? st.steps : 0);
  base[idx(Part::grad_accum)] = st.grad_accum;
  base[idx(Part::inputs)] = 8 * N;
  base[idx(Part::buffers)] = in.rotary ? (d / 2) * ex : 0;
  auto baseline = [&](bool with_states, bool with_grads) {
    std::array<u64, kPartCount> parts = base;
    if (!with_states) parts[idx(Part::optimizer_state)] = 0;
    if (with_grads) parts[idx(Part::grads)] = G;
    return parts;
  };
  const auto fb = baseline(steady, grads_live);  // forward and backward
  u64 B = 0;
  for (u64 x : fb) B += x;

  std::vector<Moment> out;
  out.reserve(12);
  auto push = [&](std::string_view name, std::string_view phase, u64 bytes,
                  const std::array<u64, kPartCount>& parts) {
    Moment m{name, phase, bytes, parts};
    finish(m);
    out.push_back(m);
  };

  const u64 rng = ck && !cuda ? L * kRngStateBytes : 0;  // CUDA: the states live on the host
  const u64 lm = in.lm_head ? V * h : 0;
  const u64 tied_copy = in.tied && in.lm_head ? ew * V * h : 0;
  const u64 C = !amp ? 0 : ck ? (in.lm_head ? ew * V * h : 0) : ew * lp.mm_all + tied_copy;
  const u64 Cl = amp ? ew * lp.l_mm : 0;
  const u64 Cb = amp ? ew * lp.bias_mm : 0;
  const u64 Gl = eg * lp.layer_trainable;
  const u64 G_head = eg * (lp.head_trainable + (in.tied ? lm : 0));

  // ---- forward ----
  {
    const u64 logits = !in.lm_head ? 0 : ec == 4 ? 4 * NV : (4 + ec) * NV;
    const u64 pad = in.lm_head && b > 1 ? 8 * b * (s + 1) : 0;
    const u64 cache = amp ? ew * (lp.mm_all + lp.bias_mm) + tied_copy : 0;
    auto parts = fb;
    parts[idx(Part::activations)] = A.total;
    parts[idx(Part::param_casts)] = cache;
    push("forward_end", "forward",
         B + A.total + cache + logits + pad + (in.lm_head ? 4 : 0) + (amp ? 4 * Nh : 0) + rng,
         parts);
  }
  {
    const u64 fwd_other = llama ? (ck || !in.causal ? 0 : s * s * ex) + 8 * s : 0;
    const u64 qrot = ex * Nad;
    const u64 amp_qkv = amp ? ew * lp.l_qkv + 4 * Nh + (llama ? 12 * Nad : 0) : 0;
    u64 bytes = 0, acts = 0;
    if (!ck) {
      const u64 Xf = B + A.embed + A.shared + (L - 1) * (A.full_layer + Cl) + fwd_other;
      acts = A.embed + A.shared + (L - 1) * A.full_layer;
      if (!eager) {
        bytes = Xf + Cb + T.norm + T.y_q + T.q + T.k + T.v + T.o_in + T.lse + amp_qkv +
                (llama && !amp ? qrot : 0);
      } else if (llama) {
        const u64 drop = pa ? (cuda ? 9 : 13) * S2 : 0;
        const u64 s2 = ec == 4 ? std::max(8 * S2 + 4, drop)
                       : amp   ? std::max((cuda ? 8 : 10) * S2, drop)
                               : std::max(10 * S2, pa ? (cuda ? 9 : 11) * S2 : 0);
        const u64 partial = T.norm + T.y_q + T.q + T.k + T.v + T.sc;
        bytes = amp ? Xf + Cb + partial + amp_qkv + s2 : Xf + partial + qrot + s2;
      } else {
        const u64 e = ec == 4 ? 4 : 2;
        const u64 sm = T.sm ? T.sm : T.core;  // selective: recomputed, same transient
        const u64 partial = T.norm + T.y_q + 3 * ec * Nh + T.q + T.k + ec + 4 + amp_qkv;
        const u64 sm_mom = pa ? sm + S2 + (cuda ? 0 : e * S2) + e * S2 : 2 * e * S2;
        bytes = Xf + Cb + partial + std::max(2 * e * S2, sm_mom);
      }
    } else {
      const u64 Xck = B + A.embed + A.shared + L * ex * Nh + rng + fwd_other + (L - 1) * Cl;
      acts = A.embed + A.shared + L * ex * Nh;
      if (!eager) {
        bytes = Xck + Cb + ex * Nh + T.q + T.k + T.v + T.o_in + T.lse + amp_qkv;
      } else if (llama) {
        const u64 drop = pa ? (ec == 2 && !amp ? (cuda ? 5 : 7) : (cuda ? 9 : 13)) * S2 : 0;
        const u64 s2n = ec == 4 ? std::max(8 * S2 + 12, drop)
                        : amp   ? std::max({4 * S2 + 10, (cuda ? 8 : 10) * S2, drop})
                                : std::max({4 * S2 + 10, 10 * S2, drop});
        bytes = amp ? Xck + Cb + 4 * Nh + 12 * Nad + s2n : Xck + ex * Nh + qrot + T.k + T.v + s2n;
      } else {
        const u64 e = ec == 4 ? 4 : 2;
        const u64 sm_mom = pa ? e * S2 + S2 + (cuda ? 0 : e * S2) + e * S2 : 2 * e * S2;
        bytes = Xck + Cb + (amp ? 4 : ex) * Nh + 3 * ec * Nh + std::max(2 * e * S2, sm_mom);
      }
    }
    auto parts = fb;
    parts[idx(Part::activations)] = acts;
    parts[idx(Part::param_casts)] = ck ? 0 : (L - 1) * Cl;
    push("forward_attention", "forward", bytes, parts);
  }

  // ---- backward ----
  {
    auto parts = fb;
    const u64 saved = in.lm_head ? A.total - A.target - 4 : A.total;
    parts[idx(Part::activations)] = saved;
    parts[idx(Part::param_casts)] = C;
    push("backward_start", "backward", B + saved + C + (in.lm_head ? 8 * NV : 0) + 8 + rng, parts);
  }
  {
    auto parts = fb;
    parts[idx(Part::grads)] = G;
    const u64 x = in.tied && in.lm_head ? 2 * V * h * eg : ex * Nh;
    push("backward_end", "backward", B + (grads_live ? 0 : G) + x + 8 + rng, parts);
  }
  const u64 grad_out = ex * Nh;
  for (const u64 j : {L - 1, u64{0}}) {
    const u64 gpart = grads_live ? 0 : G_head + (L - 1 - j) * Gl;
    u64 X0 = 0, acts = 0, casts = 0;
    if (ck) {
      const u64 recomputed = A.full_layer + (llama && ex == 2 ? ex * Nh : 0);
      X0 =
          B + 8 + rng + A.embed + A.shared + (j + 1) * ex * Nh + gpart + grad_out + recomputed + Cl;
      acts = A.embed + A.shared + (j + 1) * ex * Nh;
      casts = Cl;
    } else {
      X0 = B + 8 + A.embed + A.shared + (j + 1) * (A.full_layer + Cl) + gpart + grad_out;
      acts = A.embed + A.shared + (j + 1) * A.full_layer;
      casts = (j + 1) * Cl;
    }
    const u64 amp_mlp = amp ? ew * (lp.l_mm_mlp + lp.l_mm_o) : 0;
    const u64 g_up = eg * (lp.l_mlp + lp.l_n2 + lp.l_o);
    u64 m1 = 0, m2 = 0;
    if (llama) {
      m1 = X0 + eg * lp.l_down + 2 * ec * NI - (amp ? ew * I * h : 0);
      u64 base2 = X0 - T.mlp - (T.norm + T.y_m) - T.o_in + g_up - amp_mlp;
      if (!eager) {
        m2 =
            base2 + 3 * ec * Nad + 4 * b * a * s + (in.attention == Attention::flash ? 4 * Nad : 0);
      } else {
        base2 += T.core;  // selective: the recomputed core is live again
        if (pa) {
          const u64 e_do = ex == 2 && !amp ? 2 : 4;
          const u64 e_sv = ec;  // the saved dropout output (fp32, or half / its cast)
          m2 = base2 + std::max(((cuda ? 2 : 3) * e_do - e_sv) * S2 + (cuda ? 0 : 8 + e_do),
                                (7 - e_sv) * S2);
        } else {
          const u64 pc = T.pc ? T.pc : (T.core && ec != 4 ? ec * S2 : 0);
          m2 = base2 - pc + 8 * S2;
        }
        m2 += ec * Nad > T.v ? ec * Nad - T.v : 0;
      }
    } else {
      const u64 two = in.act == ActFn::gelu_new || in.act == ActFn::relu ? 2 : 1;
      // The first activation-backward op; under autocast the c_proj weight copy is gone, which
      // can outweigh a tiny batch's activation grads (then the addmm moment wins).
      const u64 act_bwd = two * ec * NI + eg * lp.l_down;
      const u64 copy = amp ? ew * I * h : 0;
      m1 = X0 - T.mmask +
           std::max(ec * Nh + ec * NI + (amp ? ew * I * h : eg * lp.l_down),
                    act_bwd > copy ? act_bwd - copy : 0);
      u64 base2 = X0 - T.mlp - T.mmask - T.norm - T.y_m - T.rmask - T.o_in + g_up - amp_mlp;
      if (!eager) {
        m2 =
            base2 + 3 * ec * Nad + 4 * b * a * s + (in.attention == Attention::flash ? 4 * Nad : 0);
      } else {
        base2 += T.core;
        const u64 e_sm = (T.sm ? T.sm : (ec == 4 || (amp && cuda) ? 4 : ec) * S2) / S2;
        m2 = base2 + (pa ? (cuda ? 1 : 2) * e_sm * S2 + (cuda ? 0 : 8 + e_sm) : 2 * e_sm * S2);
        if (b == 1) m2 += ec * Nh;
      }
    }
    if (ck) m2 += ex * Nh;
    auto parts = fb;
    parts[idx(Part::activations)] = acts;
    parts[idx(Part::param_casts)] = casts;
    parts[idx(Part::grads)] += gpart;
    const bool last = j == L - 1;
    push(last ? "backward_mlp_last_layer" : "backward_mlp_first_layer", "backward", m1, parts);
    push(last ? "backward_attention_last_layer" : "backward_attention_first_layer", "backward", m2,
         parts);
    if (L == 1) break;
  }

  // ---- after backward: grad_copy, optimizer, master_copy, zero_grad ----
  const auto after = baseline(steady, false);
  u64 Ba = 0;
  for (u64 x : after) Ba += x;
  if (copy_grads) {
    u64 best = 0, best_pre = 0;
    walk_order(lp, [&](u64, u64 n, u64 prefix) {
      if (prefix == 0) return;
      const u64 v = (em - eg) * prefix + eg * n;
      if (v > best) {
        best = v;
        best_pre = prefix;
      }
    });
    auto parts = after;
    parts[idx(Part::master_grads)] = em * best_pre;
    parts[idx(Part::grads)] = best + eg * lp.trainable - em * best_pre;
    push("grad_copy", "grad_copy", Ba + best + eg * lp.trainable, parts);
  }
  // The optimizer creates its states lazily on the first step, before its update loop.
  const auto opt_base = baseline(true, false);
  u64 Bo = 0;
  for (u64 x : opt_base) Bo += x;
  auto with_grads = opt_base;
  with_grads[idx(copy_grads ? Part::master_grads : Part::grads)] = Gopt;
  const u64 rec = cuda ? 0 : kRecordFunctionBytes;
  {
    const auto& o = w.run.optimizer;
    const bool fused = cuda && o.impl == OptimizerImpl::fused;
    const bool foreach = cuda && o.impl == OptimizerImpl::foreach;
    u64 temp = 0;
    u64 pair2 = 0, pair1 = 0, nmax = 0;
    walk_order(lp, [&](u64 prev, u64 n, u64) {
      pair2 = std::max(pair2, 2 * n + prev);
      pair1 = std::max(pair1, n + prev);
      nmax = std::max(nmax, n);
    });
    switch (o.kind) {
      case OptimizerKind::adam:
      case OptimizerKind::adamw:
        temp = fused ? 0 : foreach ? es * lp.trainable : es * pair2 + 8 + es;
        break;
      case OptimizerKind::adagrad:
        temp = fused ? 0 : foreach ? es * lp.trainable : es * pair1 + 8 + es;
        break;
      case OptimizerKind::rmsprop:
        temp = fused     ? 0
               : foreach ? (o.centered ? 2 : 1) * es * lp.trainable
                         : std::max(es * pair1, es * nmax + 8 + es);
        break;
      case OptimizerKind::sgd:
        break;
      case OptimizerKind::sgd_momentum:
        temp = foreach && o.nesterov ? eg * lp.trainable : 0;
        break;
      case OptimizerKind::lion:
        temp = 2 * es * nmax;
        break;
      case OptimizerKind::adafactor:
        temp = u64{8} * nmax;  // two fp32 factored-update buffers
        break;
      case OptimizerKind::adam8bit:
        break;
    }
    push("optimizer", "optimizer", Bo + Gopt + std::max(temp, rec), with_grads);
  }
  if (p.master) push("master_copy", "master_copy", Bo + Gopt, with_grads);
  push("zero_grad", "zero_grad", Bo + Gopt + rec, with_grads);
  return out;
}

Pool part_pool(const Walk& w, Part part) {
  Pool pool;
  const auto& inv = *w.lay.inv;
  const auto& p = w.run.precision;
  for (const auto& g : inv.groups) {
    const u64 n = g.tensor_elements();
    switch (part) {
      case Part::params:
        pool.add(bytes_for(g.storage.value_or(p.param), n), g.count);
        break;
      case Part::grads:
        if (g.trainable && !g.quant_state) pool.add(width(p.grad) * n, g.count);
        break;
      case Part::grad_accum:
        if (g.trainable && p.grad_accum && !g.quant_state)
          pool.add(width(*p.grad_accum) * n, g.count);
        break;
      case Part::master_params:
      case Part::master_grads:
        if (g.trainable && p.master && !g.quant_state) pool.add(width(*p.master) * n, g.count);
        break;
      case Part::optimizer_state:
        if (g.trainable && !g.quant_state && w.lay.trainable) {
          const u64 per = w.st.states / w.lay.trainable;  // state bytes per element
          pool.add(std::max<u64>(per, 1) * n, per ? g.count : 0);
          if (w.st.steps_on_device && w.st.steps) pool.add(4, g.count);
        }
        break;
      case Part::param_casts:
        if (g.matmul && !g.storage) pool.add(w.in.ew * n, g.count);
        break;
      default:
        break;
    }
  }
  if (part == Part::activations) {
    const auto& t = w.act.t;
    for (u64 x : {t.norm, t.norm, t.y_q, t.y_m, t.q, t.k, t.v, t.o_in, t.sc, t.sm, t.pc, t.dmask,
                  t.dropped, t.lse, t.rmask, t.mmask, t.mlp, t.extra})
      pool.add(x, w.in.L);
    pool.add(w.act.shared, 1);
    pool.add(w.act.embed, 1);
    pool.add(w.act.head, 1);
  }
  return pool;
}

}  // namespace

std::string_view part_name(Part part) { return kPartNames[static_cast<std::size_t>(part)]; }

std::string_view part_label(Part part) {
  static constexpr std::array<std::string_view, kPartCount> kLabels = {
      "params",       "master params",     "optimizer states",     "grads",
      "master grads", "grad accumulation", "activations",          "weight copies",
      "inputs",       "buffers",           "temporaries and other"};
  return kLabels[static_cast<std::size_t>(part)];
}

std::uint64_t cuda_block_size(std::uint64_t bytes) {
  constexpr u64 kMinBlock = 512;
  return bytes < kMinBlock ? kMinBlock : round_up(bytes, kMinBlock);
}

namespace {

// What the walk needs from the model, the precision and the optimizer: the same for every
// micro-batch and sequence length, so searches compute it once (PeakPlan).
struct Plan {
  Layout lay;
  Statics st;
};

Plan make_plan(const RunSpec& run, const ActivationInputs& in) {
  const auto& inv0 = run.model.inventory;
  const auto& arch_layers = run.model.arch ? run.model.arch->num_layers : in.L;
  const Inventory& inv = inv0.shapes_known ? inv0 : canonical_inventory(parameter_count(inv0));
  Plan plan{layout(inv, arch_layers, in.norms), {}};
  const auto& p = run.precision;
  // Static bytes from the run's own inventory: exact even when the shapes are assumed.
  const u64 trainable = trainable_count(inv0);
  plan.lay.trainable = trainable;
  Statics& st = plan.st;
  st.params = parameter_bytes(inv0, p.param);
  st.master = p.master ? checked_mul(width(*p.master), trainable) : 0;
  st.grads = checked_mul(width(p.grad), trainable);
  st.grad_accum = p.grad_accum ? checked_mul(width(*p.grad_accum), trainable) : 0;
  st.states = state_bytes(run.optimizer, inv0, trainable, p.state);
  st.steps =
      keeps_step(run.optimizer.kind) && inv0.shapes_known ? 4 * trainable_tensor_count(inv0) : 0;
  st.steps_on_device =
      run.optimizer.impl == OptimizerImpl::fused || run.training.device == Device::cpu;
  return plan;
}

Peak walk_peak(const Walk& w, bool first_step);

}  // namespace

Peak peak_of(const RunSpec& run, const ActivationInputs& in, const ActivationBytes& act,
             bool first_step) {
  const Plan plan = make_plan(run, in);
  return walk_peak(Walk{run, in, act, plan.lay, plan.st}, first_step);
}

struct PeakPlan::Impl {
  RunSpec run;
  ActivationInputs in;
  Plan plan;
};

PeakPlan::PeakPlan(const RunSpec& run, const ActivationInputs& in) : impl_(new Impl{run, in, {}}) {
  impl_->plan = make_plan(impl_->run, impl_->in);
}

PeakPlan::~PeakPlan() = default;
PeakPlan::PeakPlan(PeakPlan&&) noexcept = default;
PeakPlan& PeakPlan::operator=(PeakPlan&&) noexcept = default;

std::uint64_t PeakPlan::needed(std::uint64_t micro_batch, std::uint64_t seq_len) const {
  ActivationInputs in = impl_->in;
  in.b = micro_batch;
  in.s = seq_len;
  RunSpec& run = impl_->run;
  run.training.micro_batch = micro_batch;
  run.training.seq_len = seq_len;
  const ActivationBytes act = activation_bytes(in);
  return walk_peak(Walk{run, in, act, impl_->plan.lay, impl_->plan.st}, false).needed;
}

namespace {

// ZeRO: a rank keeps its share of the sharded states; with stage 3 the parameters of the layer
// being computed (and the next, prefetched) are gathered in full during forward and backward.
void shard_moment(Moment& m, const Sharding& sh, u64 gathered) {
  if (sh.offload) {  // held and stepped on the host: nothing of it on the device
    m.parts[idx(Part::master_params)] = 0;
    m.parts[idx(Part::optimizer_state)] = 0;
    m.parts[idx(Part::master_grads)] = 0;
    if (m.phase == "optimizer") m.parts[idx(Part::other)] = 0;
  }
  if (sh.ranks <= 1) {
    m.bytes = 0;
    for (auto v : m.parts) m.bytes = checked_add(m.bytes, v);
    return;
  }
  auto cut = [&](Part p) { m.parts[idx(p)] = shard(m.parts[idx(p)], sh.ranks); };
  if (sh.states) {
    cut(Part::master_params);
    cut(Part::optimizer_state);
    if (m.phase == "optimizer") cut(Part::other);  // the step's temporaries are per shard
  }
  if (sh.grads) {
    cut(Part::grads);
    cut(Part::master_grads);
    cut(Part::grad_accum);
  }
  if (sh.params) {
    cut(Part::params);
    if (m.phase == "forward" || m.phase == "backward") m.parts[idx(Part::other)] += gathered;
  }
  m.bytes = 0;
  for (auto v : m.parts) m.bytes = checked_add(m.bytes, v);
}

std::vector<Moment> sharded_moments(const Walk& w, bool steady) {
  auto ms = moments(w, steady);
  const Sharding sh = sharding_of(w.run.parallel);
  const u64 gathered = 2 * (w.st.params / std::max<u64>(1, w.in.L));
  for (auto& m : ms) shard_moment(m, sh, gathered);
  return ms;
}

Peak walk_peak(const Walk& w, bool first_step) {
  const RunSpec& run = w.run;
  Peak pk;
  pk.moments = sharded_moments(w, true);
  for (std::size_t i = 0; i < pk.moments.size(); ++i) {
    const auto& m = pk.moments[i];
    if (m.bytes > pk.moments[pk.winner].bytes) pk.winner = i;
    auto it = std::find_if(pk.by_phase.begin(), pk.by_phase.end(),
                           [&](const PhasePeak& ph) { return ph.phase == m.phase; });
    if (it == pk.by_phase.end()) {
      pk.by_phase.push_back({m.phase, m.bytes, m.name});
    } else if (m.bytes > it->bytes) {
      it->bytes = m.bytes;
      it->moment = m.name;
    }
  }
  pk.bytes = pk.peak_moment().bytes;
  for (const auto& m : pk.moments) {
    if (m.name == "backward_start") pk.saved_weight_copies = m.parts[idx(Part::param_casts)];
  }
  pk.phase = pk.peak_moment().phase;
  pk.first_step_bytes = pk.bytes;
  pk.first_step_phase = pk.phase;
  pk.first_step_moment = pk.peak_moment().name;
  if (first_step) {
    const auto first = sharded_moments(w, false);
    const auto fm =
        std::max_element(first.begin(), first.end(),
                         [](const Moment& x, const Moment& y) { return x.bytes < y.bytes; });
    pk.first_step_bytes = fm->bytes;
    pk.first_step_phase = fm->phase;
    pk.first_step_moment = fm->name;
  }
  pk.context_reserve = run.training.context_reserve;
  u64 device = pk.bytes;
  if (run.training.allocator == Allocator::cuda) {
    // Each part's blocks rounded as the caching allocator does; a part only partly live at
    // the peak (grads during backward) contributes in proportion.
    const auto& m = pk.peak_moment();
    u64 small = 0, mid = 0, large = 0, large_seg = 0;
    for (std::size_t i = 0; i < kPartCount; ++i) {
      const u64 live = m.parts[i];
      if (live == 0) continue;
      Pool pool = part_pool(w, static_cast<Part>(i));
      if (pool.raw == 0) {
        pool = Pool{};
        pool.add(live, 1);
      }
      const auto scale = [&](u64 x) {
        if (live >= pool.raw) return x + (live - pool.raw);
        return static_cast<u64>(static_cast<double>(x) * static_cast<double>(live) /
                                static_cast<double>(pool.raw));
      };
      small += scale(pool.small);
      mid += scale(pool.mid);
      large += scale(pool.large);
      large_seg += scale(pool.large_seg);
    }
    pk.allocated_bytes = small + mid + large;
    pk.reserved_bytes = round_up(small, kSmallBuffer) + round_up(mid, kLargeBuffer) + large_seg;
    device = *pk.reserved_bytes;
  }
  pk.needed = checked_add(device, pk.context_reserve);
  return pk;
}

}  // namespace

}  // namespace memest
