// bitsandbytes before 0.43.2 (--qlora-keeps-input): MatMul4Bit kept the input `A` of every
// 4-bit linear for backward (`ctx.tensors = (A, B)`, removed in PR #1270, July 2024), needed or
// not: each base linear keeps its input whenever that input requires grad.
#include "step/rules/rules.hpp"

namespace memest::detail {
namespace {

void keep_linear_inputs(LayerFlow& f, const ActivationInputs&) {
  f.qkv_keeps_input = f.qkv_keeps_input || f.norm1;
  f.o_keeps_input = f.o_keeps_input || f.core;
  f.mlp_keeps_input = f.mlp_keeps_input || f.norm2;
  f.down_keeps_input = f.down_keeps_input || f.gate_out;
}

}  // namespace

const Rule kNf4KeepsInputRule = {
    .name = "nf4_keeps_input",
    .applies = [](const ActivationInputs& in) { return in.grads.nf4_keeps_input; },
    .flow = keep_linear_inputs,
};

}  // namespace memest::detail
