"""Megatron-LM's theoretical memory report on the multi-GPU layouts of docs/peers.md, section 7.

Usage: python3 megatron_formula.py MEGATRON_LM_CHECKOUT > megatron_formula.json

Loads megatron/training/theoretical_memory_usage.py from the checkout unchanged (checked at
d98e8a64ddf34856e74b24714e3bedb2f5a39553); only its `.utils` import (is_hybrid_model,
print_rank_0) is replaced, so neither torch nor Megatron's initialisation is needed. The function's
own report goes to stderr; the exact bytes to stdout as JSON.
"""
import contextlib
import importlib.util
import json
import sys
import types
from types import SimpleNamespace


def load(checkout):
    pkg = types.ModuleType("megstub")
    pkg.__path__ = []
    utils = types.ModuleType("megstub.utils")
    utils.is_hybrid_model = lambda args: False
    utils.print_rank_0 = print
    sys.modules.update({"megstub": pkg, "megstub.utils": utils})
    path = f"{checkout}/megatron/training/theoretical_memory_usage.py"
    spec = importlib.util.spec_from_file_location("megstub.theoretical_memory_usage", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def pad(vocab, tp, multiple=128):  # --make-vocab-size-divisible-by 128, times tp
    m = multiple * tp
    return (vocab + m - 1) // m * m


def args(**kw):
    a = dict(num_experts=None, moe_shared_expert_intermediate_size=None, moe_layer_freq=1,
             mtp_num_layers=None, multi_latent_attention=False, moe_latent_size=None,
             moe_router_topk=2, moe_ffn_hidden_size=None, expert_tensor_parallel_size=1,
             expert_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
             use_distributed_optimizer=False, sequence_parallel=False,
             recompute_granularity=None, add_bias_linear=True, group_query_attention=False,
             context_parallel_size=1)
    a.update(kw)
    a["world_size"] = (a["tensor_model_parallel_size"] * a["pipeline_model_parallel_size"]
                       * a["data_parallel_size"] * a["context_parallel_size"])
    return SimpleNamespace(**a)


LLAMA = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, kv_channels=128,
             ffn_hidden_size=11008, swiglu=True, normalization="RMSNorm", add_bias_linear=False,
             untie_embeddings_and_output_weights=True)
GPT125 = dict(num_layers=12, hidden_size=512, num_attention_heads=8, kv_channels=64,
              ffn_hidden_size=2048, swiglu=False, normalization="LayerNorm",
              untie_embeddings_and_output_weights=False)
GPT7B = dict(num_layers=32, hidden_size=4096, num_attention_heads=32, kv_channels=128,
             group_query_attention=True, num_query_groups=8, ffn_hidden_size=16384,
             swiglu=False, normalization="LayerNorm", untie_embeddings_and_output_weights=True)

# id: (args, num_microbatches as Megatron's training loop passes it)
RUNS = {
    # entry 7 of peer_outputs.json: vocabulary 32000 as given there (Megatron would pad to 32768)
    "M7": (args(**LLAMA, padded_vocab_size=32000, seq_length=4096, micro_batch_size=1,
                tensor_model_parallel_size=8, pipeline_model_parallel_size=1,
                data_parallel_size=1, sequence_parallel=True,
                recompute_granularity="selective"), 1),
    "MG7": (args(**GPT7B, padded_vocab_size=pad(131073, 4), seq_length=8192, micro_batch_size=2,
                 tensor_model_parallel_size=4, pipeline_model_parallel_size=1,
                 data_parallel_size=2, use_distributed_optimizer=True), 2),
    "MPP2": (args(**GPT125, padded_vocab_size=pad(50257, 1), seq_length=1024, micro_batch_size=4,
                  tensor_model_parallel_size=1, pipeline_model_parallel_size=2,
                  data_parallel_size=4), 2),
    "MCP2": (args(**GPT125, padded_vocab_size=pad(50257, 2), seq_length=1024, micro_batch_size=4,
                  tensor_model_parallel_size=2, pipeline_model_parallel_size=2,
                  data_parallel_size=1, context_parallel_size=2, sequence_parallel=True), 8),
    "MPP4": (args(**LLAMA, padded_vocab_size=pad(32000, 1), seq_length=4096, micro_batch_size=1,
                  tensor_model_parallel_size=1, pipeline_model_parallel_size=4,
                  data_parallel_size=1), 8),
}


def main():
    tmu = load(sys.argv[1])
    out = {}
    for rid, (a, m) in RUNS.items():
        with contextlib.redirect_stdout(sys.stderr):
            print(f"== {rid}: num_microbatches {m}, padded vocabulary {a.padded_vocab_size}")
            tmu.report_theoretical_memory(a, num_microbatches=m, verbose=True)
            weights = tmu.compute_weight_and_optimizer_memory(a)
        sp_path = a.sequence_parallel and a.recompute_granularity == "selective"
        act = (tmu.compute_activation_memory(a, m) if sp_path
               else tmu.compute_activation_memory_without_sp(a, m))
        out[rid] = {"activation_path": "with SP" if sp_path else "without SP",
                    "weight_and_optimizer_bytes": weights, "activation_bytes": act,
                    "total_bytes": weights + act}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
