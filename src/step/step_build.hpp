// Private to the core: building a Step (include/memest/step.hpp) from a run.
#pragma once

#include "model/model_state.hpp"  // walk_inventory

#include <memest/activation.hpp>
#include <memest/step.hpp>

#include <initializer_list>
#include <utility>
#include <vector>

namespace memest::detail {

/// The model dimensions as symbols, named after the split that made them (a/t for the heads of
/// one tensor-parallel rank).
struct Dims {
  Sym h, a, k, d, dv, I, V, E, topk, Imoe, Ishared;
  explicit Dims(const ActivationInputs& in)
      : h(dim("h", in.h)),
        a(dim(in.t > 1 ? "a/t" : "a", in.a)),
        k(dim(in.t > 1 ? "kv/t" : "kv", in.k)),
        d(dim("d", in.d)),
        dv(dim("d_v", in.dv)),
        I(dim(in.t > 1 ? "I/t" : "I", in.I)),
        V(dim(in.t > 1 ? "V/t" : "V", in.V)),
        E(dim("E", in.experts)),
        topk(dim("top_k", in.topk)),
        Imoe(dim(in.t > 1 ? "I_moe/t" : "I_moe", in.I_moe)),
        Ishared(dim(in.t > 1 ? "I_shared/t" : "I_shared", in.I_shared)) {}
};

/// Appends a tensor; returns its index.
std::uint32_t add_tensor(Step& step, std::string_view name, Part part, Scope scope, Slot slot,
                         std::uint64_t width, const Shape& shape, Batch batch = Batch::any);

/// The tensors one layer, the embedding, the head and the loss save for backward
/// (docs/activation-derivation.md §3, §5), with Step::saved listing them with their counts.
void add_saved_tensors(Step& step, const ActivationInputs& in);

/// Sums of saved tensors at a point, the ActivationBytes of activation.hpp.
/// `with_terms` lists every saved (and recomputed) tensor for --explain.
ActivationBytes saved_bytes(const Step& step, const ActivationInputs& in, const Basis& x,
                            bool with_terms);

/// The whole step of a run: the saved tensors and every moment of the steady-state walk, and
/// of the first step's when `first_step`, and Step::timeline when `timeline` (src/step/walk.cpp).
Step build_step(const RunSpec& run, const ActivationInputs& in, bool first_step,
                bool timeline = false);

}  // namespace memest::detail
