#!/usr/bin/env python3
"""Closed-form training-memory formulas for memest, checked against measured PyTorch steps.

Implements docs/activation-derivation.md: parameter/gradient/master/optimizer bytes, activations
saved for backward (PyTorch >= 2 semantics, i.e. the `pytorch2` figures), and the peak of live
bytes as the maximum over a small set of moments of the step, with its phase and composition.

Usage:
  python3 activation-derivation-check.py [CASES.jsonl] [--md] [-v]   per-case table + summary
  python3 activation-derivation-check.py [CASES.jsonl] --phases      also per-phase peaks
Default CASES: tests/data/truth/cases.jsonl (run from the repository root).  No torch needed.
"""
import json
import sys

RNG_STATE = 5056        # bytes of torch.get_rng_state() (CPU generator), one per checkpointed layer
REC_FN = 292            # torch.optim record_function handle (288 + 4 B) at the start of step()/zero_grad()
LLAMA_LIKE = ("llama", "mistral", "qwen2")


# ----------------------------------------------------------------------------------------------
# config normalisation (HF defaults)
# ----------------------------------------------------------------------------------------------
def _get(cfg, *keys, default=None):
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return default


def norm_config(cfg):
    mt = cfg["model_type"]
    if mt in LLAMA_LIKE:
        h = int(cfg["hidden_size"]); a = int(cfg["num_attention_heads"])
        if mt == "qwen2":
            qkv_b, o_b, mlp_b = True, False, False
        elif mt == "mistral":
            qkv_b = o_b = mlp_b = False
        else:
            qkv_b = o_b = bool(_get(cfg, "attention_bias", default=False))
            mlp_b = bool(_get(cfg, "mlp_bias", default=False))
        return dict(family="llama", V=int(cfg["vocab_size"]), h=h, L=int(cfg["num_hidden_layers"]), a=a,
                    k=int(_get(cfg, "num_key_value_heads", default=a)),
                    d=int(_get(cfg, "head_dim", default=h // a)), I=int(cfg["intermediate_size"]),
                    tie=bool(_get(cfg, "tie_word_embeddings", default=False)),
                    qkv_b=qkv_b, o_b=o_b, mlp_b=mlp_b,
                    p_attn=float(_get(cfg, "attention_dropout", default=0.0)),
                    act=_get(cfg, "hidden_act", default="silu"))
    if mt == "gpt2":
        h = int(_get(cfg, "n_embd", "hidden_size", default=768))
        a = int(_get(cfg, "n_head", "num_attention_heads", default=12))
        return dict(family="gpt2", V=int(_get(cfg, "vocab_size", default=50257)), h=h,
                    L=int(_get(cfg, "n_layer", "num_hidden_layers", default=12)), a=a, k=a, d=h // a,
                    I=int(_get(cfg, "n_inner", default=4 * h)),
                    npos=int(_get(cfg, "n_positions", "max_position_embeddings", default=1024)),
                    tie=bool(_get(cfg, "tie_word_embeddings", default=True)),
                    p_resid=float(_get(cfg, "resid_pdrop", default=0.1)),
                    p_embd=float(_get(cfg, "embd_pdrop", default=0.1)),
                    p_attn=float(_get(cfg, "attn_pdrop", default=0.1)),
                    act=_get(cfg, "activation_function", default="gelu_new"))
    raise ValueError(mt)


# ----------------------------------------------------------------------------------------------
# parameters: ordered list of (name, numel, kind) in model.parameters() order
#   kind: "mm"   weight consumed by a matmul (autocast makes + saves a bf16 copy)
#         "bias" bias of a matmul (autocast casts it, cached during forward only)
#         "emb"  embedding table (for tied models also the lm_head matmul weight)
#         "norm" norm weights / biases (never cast)
# ----------------------------------------------------------------------------------------------
def param_list(c):
    V, h, L, a, k, d, I = c["V"], c["h"], c["L"], c["a"], c["k"], c["d"], c["I"]
    P = []
    if c["family"] == "llama":
        P.append(("embed_tokens", V * h, "emb"))
        for _ in range(L):
            for nm, din, dout, b in (("q", h, a * d, c["qkv_b"]), ("k", h, k * d, c["qkv_b"]),
                                     ("v", h, k * d, c["qkv_b"]), ("o", a * d, h, c["o_b"])):
                P.append((nm, din * dout, "mm"))
                if b:
                    P.append((nm + ".b", dout, "bias"))
            for nm, din, dout in (("gate", h, I), ("up", h, I), ("down", I, h)):
                P.append((nm, din * dout, "mm"))
                if c["mlp_b"]:
                    P.append((nm + ".b", dout, "bias"))
            P.append(("input_ln", h, "norm")); P.append(("post_ln", h, "norm"))
        P.append(("norm", h, "norm"))
        if not c["tie"]:
            P.append(("lm_head", V * h, "mm"))
    else:
        P.append(("wte", V * h, "emb")); P.append(("wpe", c["npos"] * h, "norm"))
        for _ in range(L):
            P += [("ln_1.w", h, "norm"), ("ln_1.b", h, "norm"),
                  ("c_attn", h * 3 * h, "mm"), ("c_attn.b", 3 * h, "bias"),
                  ("attn.c_proj", h * h, "mm"), ("attn.c_proj.b", h, "bias"),
                  ("ln_2.w", h, "norm"), ("ln_2.b", h, "norm"),
                  ("c_fc", h * I, "mm"), ("c_fc.b", I, "bias"),
                  ("mlp.c_proj", I * h, "mm"), ("mlp.c_proj.b", h, "bias")]
        P += [("ln_f.w", h, "norm"), ("ln_f.b", h, "norm")]
        if not c["tie"]:
            P.append(("lm_head", V * h, "mm"))
    return P


POLICY = {  # (param bytes, state/master bytes used by the optimizer, residual-stream bytes)
    "fp32": (4, 4), "autocast-bf16": (4, 4), "bf16": (2, 2), "master-bf16": (2, 4)}


def static_bytes(c, tr):
    P = param_list(c)
    n = sum(x[1] for x in P); T = len(P)
    ep, es = POLICY[tr["precision"]]
    opt = tr["optimizer"]
    state = {"sgd": 0, "sgd+momentum": n * es, "adam": 2 * n * es + 4 * T, "adamw": 2 * n * es + 4 * T,
             "adagrad": n * es + 4 * T, "rmsprop": n * es + 4 * T}[opt]
    master = 4 * n if tr["precision"] == "master-bf16" else 0
    buffers = (c["d"] // 2) * ep if c["family"] == "llama" else 0      # rotary inv_freq (follows model dtype)
    inputs = 8 * tr["batch"] * tr["seq"]                               # input_ids (labels is the same tensor)
    return dict(param_count=n, param_tensor_count=T, params_bytes=n * ep, grads_bytes=n * ep,
                master_bytes=master, master_grads_bytes=master, optimizer_bytes=state,
                buffers_bytes=buffers, inputs_bytes=inputs,
                baseline_bytes=n * ep + master + state + buffers + inputs)


# ----------------------------------------------------------------------------------------------
# activations saved for backward (PyTorch 2 semantics), by part
# ----------------------------------------------------------------------------------------------
def activations(c, tr, cuda=False):
    """Bytes saved for backward.  Returns per_layer (as stored: the layer input only under
    checkpointing), full_layer (the non-checkpointed per-layer bytes, also what one recomputed layer
    holds), shared (cos/sin [+mask]; counted in layer0), embed, head, total, target_storage (the loss
    target's storage, freed first in backward), param_casts (autocast bf16 weight copies that stay
    saved; NOT part of total) and the named per-layer terms used by the peak moments.
    cuda=True gives the CUDA-autocast / CUDA-LayerNorm variant (not measurable here)."""
    b, s, prec, ck = tr["batch"], tr["seq"], tr["precision"], tr["checkpointing"]
    V, h, L, a, k, d, I = c["V"], c["h"], c["L"], c["a"], c["k"], c["d"], c["I"]
    N = b * s; Nh = N * h; Nad = N * a * d; S2 = b * a * s * s
    amp = prec == "autocast-bf16"
    ex = 2 if prec in ("bf16", "master-bf16") else 4          # residual stream / model dtype
    ec = 2 if prec != "fp32" else 4                             # matmul compute dtype
    target = 8 * (s + 1) if b == 1 else 8 * N                   # shift_labels storage (b==1: a view of the padded labels)
    head_loss = 4 * N * V + target + 4                          # log_softmax out (fp32) + target + total_weight
    P = param_list(c)
    if c["family"] == "llama":
        # RMSNorm: fp32 input saved by pow (4Nh), rsqrt (4N), normed saved by weight-mul
        norm = 4 * Nh + 4 * N + (4 if ex == 4 else 2) * Nh
        if amp:
            y_q = 3 * 2 * Nh; y_m = 2 * 2 * Nh; y_h = 2 * Nh   # a bf16 cast of the norm output per consuming linear
        else:
            y_q = y_m = y_h = ex * Nh                           # the norm output itself, saved once
        # q copy, k (repeated), v (repeated), o_proj input; scaling scalar.  MQA with batch 1: repeat_kv
        # is a stride-0 view that bmm can use without copying, so only the un-repeated storage is kept
        kv_k = kv_v = ec * Nad
        if k == 1 and b == 1:
            kv_v = ec * N * d
            kv_k = 2 * Nad if amp else ec * N * d               # autocast: k (rotated, fp32) is cast = full copy
        attn = 2 * ec * Nad + kv_k + kv_v + 8
        p = c["p_attn"]
        if prec == "fp32":
            attn += (9 if p > 0 else 4) * S2
        else:
            attn += (7 if p > 0 else 6) * S2                    # fp32 softmax out (4) + bf16 copy/dropout out (2) (+1 mask)
        act = c["act"]
        n_act = {"silu": 4, "swish": 4, "gelu": 4, "gelu_pytorch_tanh": 4, "gelu_fast_tanh": 4, "relu": 3,
                 "gelu_new": 7}[act]
        mlp = n_act * ec * N * I + (24 if act == "gelu_new" else 0)
        per_layer = 2 * norm + y_q + y_m + attn + mlp
        full_layer = per_layer
        terms = dict(norm=norm, y_q=y_q, y_m=y_m, q=ec * Nad, k=kv_k, v=kv_v, o_in=ec * Nad, sc=8,
                     sm=4 * S2, pc=(0 if (prec == "fp32" or p > 0) else 2 * S2),
                     dmask=(S2 if p > 0 else 0),
                     dropped=((4 if prec in ("fp32",) else 2) * S2 if p > 0 else 0), mlp=mlp)
        shared = 2 * s * d * ex                                  # rotary cos + sin [1,s,d] in model dtype
        if ck:
            per_layer = ex * Nh                                  # checkpoint keeps the layer input only
            shared += s * s * ex                                 # ... plus its other tensor args: cos, sin, mask
        embed = 0
        head = norm + y_h + head_loss
    else:
        eln = 2 if ex == 2 else 4                                # LN mean/rstd dtype (CPU: input dtype)
        if cuda:
            eln = 4
        ln = ex * Nh + 2 * eln * N
        y = 2 * Nh if amp else ex * Nh                           # input saved by c_attn / c_fc / lm_head
        pr, pa = c["p_resid"], c["p_attn"]
        attn = 4 * ec * Nh + ec                                  # q, k, v copies, c_proj input; the 0-d divisor
        e_sm = 4 if (prec == "fp32" or (amp and cuda)) else 2   # softmax output dtype
        attn += e_sm * S2
        if pa > 0:
            attn += S2 + ec * S2                                 # bool mask + dropout output
        elif amp and cuda:
            attn += 2 * S2                                       # .type(bf16) copy
        masks = 2 * Nh if pr > 0 else 0
        act = c["act"]
        if act == "gelu_new":
            mlp = (16 if (amp and cuda) else 5 * ec) * N * I + 24
        elif act == "relu":
            mlp = ec * N * I
        else:
            mlp = 2 * ec * N * I
        per_layer = 2 * ln + 2 * y + attn + masks + mlp
        full_layer = per_layer
        terms = dict(ln=ln, y=y, q=ec * Nh, k=ec * Nh, v=ec * Nh, o_in=ec * Nh, div=ec, sm=e_sm * S2,
                     dmask=(S2 if pa > 0 else 0), dropped=(ec * S2 if pa > 0 else 0),
                     rmask=(Nh if pr > 0 else 0), mmask=(Nh if pr > 0 else 0), mlp=mlp)
        shared = s * s                                            # bool causal mask
        if ck:
            per_layer = ex * Nh
        embed = 8 * s + (Nh if c["p_embd"] > 0 else 0)            # position_ids (int64) + embd dropout mask
        head = ln + y + head_loss
    total = L * per_layer + shared + embed + head
    casts = 0
    if amp:
        mm = sum(x[1] for x in P if x[2] == "mm")
        lm = V * h
        if not ck:
            casts = 2 * mm + (2 * lm if c["tie"] else 0)
        else:
            casts = 2 * lm
    return dict(per_layer=per_layer, shared=shared, embed=embed, head=head, total=total,
                target_storage=target, param_casts=casts, full_layer=full_layer, terms=terms)


def activations_by_dtype(c, tr, cuda=False):
    """The same total split by dtype (float32 / bfloat16 / bool / int64 / float64)."""
    b, s, prec, ck = tr["batch"], tr["seq"], tr["precision"], tr["checkpointing"]
    V, h, L, a, k, d, I = c["V"], c["h"], c["L"], c["a"], c["k"], c["d"], c["I"]
    N = b * s; Nh = N * h; Nad = N * a * d; S2 = b * a * s * s; NI = N * I
    amp = prec == "autocast-bf16"; pure = prec in ("bf16", "master-bf16")
    cdt = "float32" if prec == "fp32" else "bfloat16"       # matmul compute dtype
    xdt = "bfloat16" if pure else "float32"                 # residual stream dtype
    A = activations(c, tr, cuda); T = A["terms"]
    out = {}

    def add(dt, n):
        if n:
            out[dt] = out.get(dt, 0) + n
    target = A["target_storage"]
    add("int64", target); add("float32", 4 * N * V + 4)       # labels, log-probs, total_weight
    if c["family"] == "llama":
        en = 2 if pure else 4
        norm = [("float32", 4 * Nh + 4 * N), ("bfloat16" if pure else "float32", en * Nh)]
        for dt, n in norm:                                    # final norm
            add(dt, n)
        add(cdt if not amp else "bfloat16", A["head"] - 4 * N * V - 4 - target - sum(n for _, n in norm))
        add(xdt, 2 * s * d * (2 if pure else 4))              # cos, sin
        if ck:
            add(xdt, L * (2 if pure else 4) * Nh + s * s * (2 if pure else 4))
        else:
            for dt, n in norm:
                add(dt, 2 * L * n)
            add("bfloat16" if amp else cdt, L * (T["y_q"] + T["y_m"] + T["q"] + T["k"] + T["v"] + T["o_in"] + T["mlp"]
                                                 - (24 if c["act"] == "gelu_new" else 0)))
            add("float64", L * (8 + (24 if c["act"] == "gelu_new" else 0)))
            add("float32", L * T["sm"])
            add("bfloat16", L * T["pc"])
            add("bool", L * T["dmask"])
            add("float32" if prec == "fp32" else "bfloat16", L * T["dropped"])
    else:
        add("int64", 8 * s)
        add("bool", Nh if c["p_embd"] > 0 else 0)
        ln_dt = xdt if not cuda else "float32"
        add(xdt, (2 if pure else 4) * Nh)                      # ln_f input
        add(ln_dt if not amp else "float32", A["terms"]["ln"] - (2 if pure else 4) * Nh)   # ln_f mean/rstd
        add("bfloat16" if amp else xdt, A["terms"]["y"])
        add("bool", s * s)
        if ck:
            add(xdt, L * (2 if pure else 4) * Nh)
        else:
            add(xdt, 2 * L * (2 if pure else 4) * Nh)
            add(ln_dt if not amp else "float32", 2 * L * (T["ln"] - (2 if pure else 4) * Nh))
            add("bfloat16" if amp else xdt, 2 * L * T["y"])
            add(cdt, L * (T["q"] + T["k"] + T["v"] + T["o_in"] + T["div"] + T["dropped"]))
            add("float32" if T["sm"] == 4 * S2 else "bfloat16", L * T["sm"])
            add("bool", L * (T["dmask"] + T["rmask"] + T["mmask"]))
            mlp = T["mlp"] - (24 if c["act"] == "gelu_new" else 0)
            add(cdt, L * mlp)
            add("float64", L * (24 if c["act"] == "gelu_new" else 0))
    return out


# ----------------------------------------------------------------------------------------------
# peak
# ----------------------------------------------------------------------------------------------
def layer_param_groups(c):
    """numel of the parameters of one layer, grouped: all, mlp (all MLP linears + biases), down
    (the last MLP linear + bias), n2 (norm before the MLP), o (attention output proj + bias),
    mm (matmul weights of the layer), mm_mlp, mm_o (their weights only)."""
    h, a, k, d, I = c["h"], c["a"], c["k"], c["d"], c["I"]
    if c["family"] == "llama":
        qkv = h * a * d + 2 * h * k * d + (a * d + 2 * k * d if c["qkv_b"] else 0)
        o = a * d * h + (h if c["o_b"] else 0)
        down = I * h + (h if c["mlp_b"] else 0)
        mlp = 2 * h * I + down + (2 * I if c["mlp_b"] else 0)
        n2 = h
        allp = qkv + o + mlp + 2 * h
        mm_mlp = 3 * h * I; mm_o = a * d * h; mm = h * a * d + 2 * h * k * d + mm_o + mm_mlp
    else:
        o = h * h + h; down = I * h + h; mlp = h * I + I + down; n2 = 2 * h
        allp = 2 * h + 3 * h * h + 3 * h + o + n2 + mlp
        mm_mlp = 2 * h * I; mm_o = h * h; mm = 3 * h * h + mm_o + mm_mlp
    return dict(all=allp, mlp=mlp, down=down, n2=n2, o=o, mm=mm, mm_mlp=mm_mlp, mm_o=mm_o)


def peak(c, tr, cuda=False):
    """Candidate moments of the step (bytes live); the peak is their maximum.
    Exact for the moments the 40 reference cases hit; the in-layer moments ignore CPU-only kernel
    scratch (bf16 gemm buffers) and are exact for fp32."""
    st = static_bytes(c, tr)
    A = activations(c, tr, cuda)
    T = A["terms"]; AL = A["full_layer"]
    b, s, prec, ck, opt = tr["batch"], tr["seq"], tr["precision"], tr["checkpointing"], tr["optimizer"]
    V, h, L, a, d, I = c["V"], c["h"], c["L"], c["a"], c["d"], c["I"]
    N = b * s; Nh = N * h; Nad = N * a * d; NI = N * I; S2 = b * a * s * s
    ep, es = POLICY[prec]
    amp = prec == "autocast-bf16"
    ex = 2 if prec in ("bf16", "master-bf16") else 4
    ec = 4 if prec == "fp32" else 2
    eg = 4 if amp else ep                       # bytes of a parameter gradient
    P = param_list(c)
    B = st["baseline_bytes"]; G = st["grads_bytes"]
    lp = layer_param_groups(c)
    Gl = eg * lp["all"]
    Cl = 2 * lp["mm"] if amp else 0             # saved bf16 weight copies of one layer (autocast)
    Cb = 2 * sum(x[1] for x in P if x[2] == "bias") if amp else 0
    llama = c["family"] == "llama"
    G_head = eg * (V * h + (h if llama else 2 * h))
    cand = {}
    # ---------------- forward ----------------
    logits = 4 * N * V if prec == "fp32" else 6 * N * V
    pad = 8 * b * (s + 1) if b > 1 else 0
    # autocast keeps every bf16 weight/bias copy in its cache until the autocast region exits (also the
    # copies made inside checkpointed layers, which run under no_grad): 2 B per matmul weight and bias
    cache_all = (2 * sum(x[1] for x in P if x[2] in ("mm", "bias")) + (2 * V * h if c["tie"] else 0)) if amp else 0
    # + autocast: the fp32 final-norm output (only its bf16 copy is saved) is still referenced by the
    #   model's forward; + checkpointing: the layers' RNG states
    cand["forward_end"] = (B + A["total"] + cache_all + logits + pad + 4 + (4 * Nh if amp else 0)
                           + (L * RNG_STATE if ck else 0))
    # llama: the additive mask (model dtype, not saved unless checkpointing) and position ids are live
    fwd_other = ((0 if ck else s * s * ex) + 8 * s) if llama else 0
    pa = c["p_attn"] > 0
    if llama:
        # S2-sized live bytes at the worst attention-forward moment (softmax output included)
        if prec == "fp32":
            s2 = max(8 * S2 + 4, (13 if not cuda else 9) * S2 if pa else 0)
        elif amp:
            s2 = max((10 if not cuda else 8) * S2, (13 if not cuda else 9) * S2 if pa else 0)
        else:
            s2 = max(10 * S2, (11 if not cuda else 9) * S2 if pa else 0)
        qrot = ex * Nad                                            # rotated q (held by the attention frame)
    if not ck:
        Xf = B + A["embed"] + A["shared"] + (L - 1) * (AL + Cl) + fwd_other
        if llama:
            partial = T["norm"] + T["y_q"] + T["q"] + T["k"] + T["v"] + T["sc"]
            if amp:     # + this layer's q/k/v weight copies, the fp32 norm output, fp32 q_rot/k_rep/v_rep
                partial += 2 * (h * a * d + 2 * h * c["k"] * d) + 4 * Nh + 3 * 4 * Nad
                cand["forward_attn"] = Xf + Cb + partial + s2
            else:
                cand["forward_attn"] = Xf + partial + qrot + s2
        else:
            e = 4 if prec == "fp32" else 2
            partial = T["ln"] + T["y"] + 3 * ec * Nh + T["q"] + T["k"] + T["div"] + 4
            if amp:
                partial += 2 * 3 * h * h + 4 * Nh
            sm_mom = (T["sm"] + S2 + (0 if cuda else e * S2) + e * S2) if pa else 2 * e * S2
            cand["forward_attn"] = Xf + Cb + partial + max(2 * e * S2, sm_mom)
    else:
        # checkpointed layers run under no_grad: only the layer inputs (+cos/sin/mask) and one RNG
        # state per layer stay; the last layer's attention transients are live
        Xck = B + A["embed"] + A["shared"] + L * ex * Nh + L * RNG_STATE + fwd_other + (L - 1) * Cl
        if llama:
            # no_grad: the fp32 softmax output is freed once cast (bf16); the scaling scalar (8 B + cast)
            # lives only around the mul
            if prec == "fp32":
                s2n = max(8 * S2 + 12, ((13 if not cuda else 9) * S2) if pa else 0)
            elif amp:
                s2n = max(4 * S2 + 10, (10 if not cuda else 8) * S2, ((13 if not cuda else 9) * S2) if pa else 0)
            else:
                s2n = max(4 * S2 + 10, 10 * S2, ((7 if not cuda else 5) * S2) if pa else 0)
            if amp:
                cand["forward_attn"] = Xck + Cb + 4 * Nh + 12 * Nad + s2n
            else:
                kv = (T["k"] + T["v"])
                cand["forward_attn"] = Xck + ex * Nh + qrot + kv + s2n
        else:
            e = 4 if prec == "fp32" else 2
            y = (4 if amp else ex) * Nh
            sm_mom = (e * S2 + S2 + (0 if cuda else e * S2) + e * S2) if pa else 2 * e * S2
            cand["forward_attn"] = Xck + Cb + y + 3 * ec * Nh + max(2 * e * S2, sm_mom)
    # ---------------- backward ----------------
    rng = L * RNG_STATE if ck else 0
    cand["backward_start"] = B + A["total"] - A["target_storage"] - 4 + A["param_casts"] + 8 * N * V + 8 + rng
    cand["backward_end"] = B + G + (2 * V * h * ep if c["tie"] else Nh * ex) + 8 + rng
    grad_out = ex * Nh
    for j in sorted({L - 1, 0}):
        if ck:
            # recomputed layer: all its saved tensors + its output; fp32/autocast RMSNorm and LayerNorm
            # re-save the checkpointed input itself (no new bytes), bf16 RMSNorm saves a new fp32 copy
            recomputed = AL + (ex * Nh if (llama and ex == 2) else 0)
            X0 = (B + 8 + rng + A["embed"] + A["shared"] + (j + 1) * ex * Nh + G_head + (L - 1 - j) * Gl
                  + grad_out + recomputed + Cl)
        else:
            X0 = (B + 8 + A["embed"] + A["shared"] + (j + 1) * (AL + Cl) + G_head + (L - 1 - j) * Gl
                  + grad_out)
        if llama:
            # MulBackward of act(gate)*up: grads of both factors; down_proj's saved input (and its
            # autocast weight copy) already released
            m1 = X0 + eg * lp["down"] + 2 * ec * NI - (2 * I * h if amp else 0)
            base2 = (X0 - T["mlp"] - (T["norm"] + T["y_m"]) - T["o_in"] + eg * (lp["mlp"] + lp["n2"] + lp["o"])
                     - (2 * (lp["mm_mlp"] + lp["mm_o"]) if amp else 0))
            if c["p_attn"] > 0:
                # dropout backward (CPU: mask cast + 2 muls; CUDA: fused) vs softmax backward (mask freed)
                e_do = 2 if prec in ("bf16", "master-bf16") else 4      # dtype of the dropout
                e_sv = T["dropped"] // S2                                # saved dropout output (or its bf16 cast)
                m2 = base2 + max(((2 if cuda else 3) * e_do - e_sv) * S2 + (0 if cuda else 8 + e_do),
                                 (7 - e_sv) * S2)
            else:
                m2 = base2 - T["pc"] + 8 * S2
            m2 += ec * Nad - T["v"]     # grad of the repeated V is full size even when V was saved as a view
        else:
            act = c["act"]
            # c_proj AddmmBackward (its input grad + weight/bias grads, dropout-backward output still
            # alive) or the first activation-backward op (c_proj input and weight copy released)
            adelta = (2 if act in ("gelu_new", "relu") else 1) * ec * NI - (2 * I * h if amp else 0)
            # (autocast: at the AddmmBackward moment the weight grad exists only as the bf16 product 2·I·h;
            #  its fp32 .grad appears after the cast copy is released)
            m1 = X0 - T["mmask"] + max(ec * Nh + ec * NI + (2 * I * h if amp else eg * lp["down"]),
                                       adelta + eg * lp["down"])
            base2 = (X0 - T["mlp"] - T["mmask"] - T["ln"] - T["y"] - T["rmask"] - T["o_in"]
                     + eg * (lp["mlp"] + lp["n2"] + lp["o"]) - (2 * (lp["mm_mlp"] + lp["mm_o"]) if amp else 0))
            e_sm = T["sm"] // S2
            if c["p_attn"] > 0:
                m2 = base2 + (1 if cuda else 2) * e_sm * S2 + (0 if cuda else 8 + e_sm)
            else:
                m2 = base2 + 2 * e_sm * S2
            if b == 1:      # q, k, v are views of one c_attn output: v's storage is not freed by bmm backward
                m2 += ec * Nh
        if ck:
            m2 += ex * Nh   # grad_out stays referenced by checkpoint's backward (torch.autograd.backward(outputs, args))
        cand[f"backward_mlp_L{j}"] = m1
        cand[f"backward_attn_L{j}"] = m2
    # ---------------- grad_copy (master-bf16) ----------------
    if prec == "master-bf16":
        tot = sum(x[1] for x in P); pre = 0; best = 0; suf = tot
        for (_, n, _) in P:
            pre += n
            best = max(best, 4 * pre + 2 * suf)
            suf -= n
        cand["grad_copy"] = B + best
    # ---------------- optimizer ----------------
    Gopt = 4 * st["param_count"] if prec == "master-bf16" else G
    sizes = [x[1] * es for x in P]
    if opt in ("adam", "adamw"):
        t = max(2 * sizes[i] + (sizes[i - 1] if i else 0) for i in range(len(sizes))) + 8 + es
    elif opt == "adagrad":
        t = max(sizes[i] + (sizes[i - 1] if i else 0) for i in range(len(sizes))) + 8 + es
    elif opt == "rmsprop":
        t = max(max(sizes[i] + (sizes[i - 1] if i else 0) for i in range(len(sizes))), max(sizes) + 8 + es)
    else:
        t = 0
    cand["optimizer"] = B + Gopt + max(t, REC_FN)
    cand["zero_grad"] = B + Gopt + REC_FN
    cand["master_copy"] = B + Gopt                  # in-place copies, nothing allocated
    if prec != "master-bf16":
        cand["grad_copy"] = B + G                   # phase marker only
    phase = max(cand, key=cand.get)
    return cand[phase], phase, cand


def breakdown(c, tr, moment):
    """Composition (the instrument's categories) of the candidate moments the reference cases hit."""
    st = static_bytes(c, tr); A = activations(c, tr)
    b, s, prec, ck = tr["batch"], tr["seq"], tr["precision"], tr["checkpointing"]
    V, h, L = c["V"], c["h"], c["L"]; N = b * s; Nh = N * h
    ep, es = POLICY[prec]; ex = 2 if prec in ("bf16", "master-bf16") else 4
    bd = dict(params=st["params_bytes"], master_params=st["master_bytes"], optimizer_state=st["optimizer_bytes"],
              grads=0, master_grads=0, activations=0, param_casts=0, inputs=st["inputs_bytes"],
              buffers=st["buffers_bytes"], other=0)
    rng = L * RNG_STATE if ck else 0
    if moment == "backward_start":
        bd["activations"] = A["total"] - A["target_storage"] - 4
        bd["param_casts"] = A["param_casts"]
        bd["other"] = 8 * N * V + 8 + rng
    elif moment == "backward_end":
        bd["grads"] = st["grads_bytes"]
        bd["other"] = (2 * V * h * ep if c["tie"] else Nh * ex) + 8 + rng
    elif moment in ("optimizer", "zero_grad"):
        _, _, cand = peak(c, tr)
        if prec == "master-bf16":
            bd["master_grads"] = st["master_grads_bytes"]
        else:
            bd["grads"] = st["grads_bytes"]
        bd["other"] = cand[moment] - sum(bd.values())
    elif moment == "grad_copy":
        P = param_list(c); tot = sum(x[1] for x in P); pre = 0; suf = tot; best = (-1, 0, 0)
        for (_, n, _) in P:
            pre += n
            if 4 * pre + 2 * suf > best[0]:
                best = (4 * pre + 2 * suf, 4 * pre, 2 * suf)
            suf -= n
        bd["master_grads"], bd["grads"] = best[1], best[2]
    else:
        return None
    return bd


def phase_of(moment):
    for ph in ("grad_copy", "zero_grad", "master_copy"):
        if moment.startswith(ph):
            return ph
    return moment.split("_")[0]


def phase_peaks(cand):
    out = {}
    for k, v in cand.items():
        ph = phase_of(k)
        out[ph] = max(out.get(ph, 0), v)
    return out


def phase_name(p):
    return phase_of(p)


def main():
    path = "tests/data/truth/cases.jsonl"
    args = [x for x in sys.argv[1:] if not x.startswith("-")]
    if args:
        path = args[0]
    verbose = "-v" in sys.argv
    worst_a = worst_p = 0.0
    n_exact_a = n_exact_p = n_phase = n_bd = n_bd_app = 0
    rows = []
    for line in open(path):
        case = json.loads(line)
        c = norm_config(case["config"]); tr = case["training"]
        m, p2 = case["measured"], case["pytorch2"]
        st = static_bytes(c, tr)
        ex_ok = all(st[k] == (p2[k] if k in p2 else m[k]) for k in
                    ("param_count", "params_bytes", "grads_bytes", "optimizer_bytes", "master_bytes",
                     "param_tensor_count", "master_grads_bytes"))
        A = activations(c, tr)
        pk, ph, cand = peak(c, tr)
        ma, mp = p2["activations_saved_bytes"], p2["peak_bytes"]
        ea = (A["total"] - ma) / ma; ep_ = (pk - mp) / mp
        casts_ok = A["param_casts"] == m["saved_param_casts_bytes"]
        mdt = dict(m["activations_saved_by_dtype"])
        mean_in = m.get("activations_saved_mean_input_bytes") or 0
        if mean_in:
            mdt["float32"] -= mean_in
        casts_ok = casts_ok and (activations_by_dtype(c, tr) == mdt)
        cpu_amp_gpt2 = not case["checks"].get("activations_within_3pct", True)
        n_exact_a += A["total"] == ma; n_exact_p += pk == mp; n_phase += phase_of(ph) == p2["peak_phase"]
        worst_a = max(worst_a, abs(ea)); worst_p = max(worst_p, abs(ep_))
        bd = breakdown(c, tr, ph)
        bd_ok = bd == {k: v for k, v in p2["peak_breakdown"].items()} if bd else None
        if tr["optimizer"] == "rmsprop" and bd:      # pytorch2 adds the step tensors to the peak only
            bd2 = dict(bd); bd2["optimizer_state"] -= 4 * st["param_tensor_count"]
            bd_ok = bd2 == p2["peak_breakdown"]
        n_bd += bool(bd_ok); n_bd_app += bd is not None
        rows.append((case["id"], A["total"], ma, ea, pk, mp, ep_, ph, p2["peak_phase"], ex_ok, casts_ok, bd_ok))
        if verbose and (pk != mp or A["total"] != ma):
            print("   ", case["id"], {k: v - mp for k, v in cand.items()}, p2["peak_breakdown"])
    md = "--md" in sys.argv
    if md:
        print("| case | activations pred | activations meas | err | peak pred | peak meas | err | peak moment (pred) / phase (meas) | exact fields | casts+dtype | composition |")
        print("|---|---:|---:|---:|---:|---:|---:|---|---|---|---|")
    else:
        print(f"{'case':44s} {'act_pred':>11s} {'act_meas':>11s} {'err':>8s} {'peak_pred':>11s} {'peak_meas':>11s} {'err':>8s} "
              f"moment(pred)/phase(meas) exact casts+dtype composition")
    for r in rows:
        if md:
            print(f"| {r[0]} | {r[1]:,} | {r[2]:,} | {r[3]*100:.3f}% | {r[4]:,} | {r[5]:,} | {r[6]*100:.3f}% | {r[7]} / {r[8]} | {r[9]} | {r[10]} | {r[11]} |")
        else:
            print(f"{r[0]:44s} {r[1]:11d} {r[2]:11d} {r[3]*100:7.3f}% {r[4]:11d} {r[5]:11d} {r[6]*100:7.3f}% {r[7]}/{r[8]} {r[9]} {r[10]} {r[11]}")
    print(f"exact activations {n_exact_a}/{len(rows)}, exact peaks {n_exact_p}/{len(rows)}, phases {n_phase}/{len(rows)}; "
          f"worst |err| activations {worst_a*100:.4f}%, peak {worst_p*100:.4f}%; "
          f"peak composition exact {n_bd}/{n_bd_app} (cases whose peak moment has a closed breakdown)")


if __name__ == "__main__":
    main()


def phase_report(path):
    """Per-phase peaks (forward / backward / optimizer / grad_copy / zero_grad) against files that
    carry pytorch2.peak_by_phase (the grid files produced with the instrument)."""
    worst = {}
    nexact = {}
    n = 0
    bad = []
    for line in open(path):
        case = json.loads(line)
        c = norm_config(case["config"]); tr = case["training"]
        _, _, cand = peak(c, tr)
        pp = phase_peaks(cand)
        pbp = case["pytorch2"].get("peak_by_phase")
        if not pbp:
            # reference cases: per-phase peaks exist only for torch 1.13, whose MeanBackward1 keeps RMSNorm's
            # fp32 x**2 (measured.activations_saved_mean_input_bytes) alive from the forward until the
            # norm's backward: add it to the prediction where the phase peak is at forward end / backward start
            m = case["measured"]; mi = m.get("activations_saved_mean_input_bytes") or 0
            pbp = dict(m["peak_by_phase"])
            adj = dict(pp)
            fwd_m = max((k for k in cand if phase_of(k) == "forward"), key=cand.get)
            bwd_m = max((k for k in cand if phase_of(k) == "backward"), key=cand.get)
            if fwd_m == "forward_end":
                adj["forward"] += mi
            if bwd_m == "backward_start":
                adj["backward"] += mi
            if tr["optimizer"] == "rmsprop":     # 1.13 keeps RMSprop's step as a python int
                adj = {k: v - 4 * static_bytes(c, tr)["param_tensor_count"] for k, v in adj.items()}
            pp = adj
        n += 1
        for ph in ("forward", "backward", "grad_copy", "optimizer", "master_copy", "zero_grad"):
            meas = pbp[ph]
            e = (pp[ph] - meas) / meas
            worst[ph] = max(worst.get(ph, 0), abs(e))
            nexact[ph] = nexact.get(ph, 0) + (pp[ph] == meas)
            if abs(e) > float(__import__('os').environ.get('PHASE_TOL', '0.01')):
                bad.append((case["id"], ph, pp[ph], meas, round(100 * e, 3)))
    print(f"{n} cases with per-phase data; exact per phase: {nexact}; worst |err| per phase (%): "
          + ", ".join(f"{k} {100*v:.3f}" for k, v in worst.items()))
    for x in bad:
        print("   >1%:", x)


if __name__ == "__main__" and "--phases" in sys.argv:
    _a = [x for x in sys.argv[1:] if not x.startswith("-")]
    phase_report(_a[0] if _a else "tests/data/truth/cases.jsonl")
