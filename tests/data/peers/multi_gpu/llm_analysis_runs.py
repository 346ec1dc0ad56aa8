"""llm-analysis's training() on the multi-GPU layouts of docs/peers.md, section 7.

Usage: python3 llm_analysis_runs.py LLM_ANALYSIS_CHECKOUT > llm_analysis.json

Runs cli99/llm-analysis (checked at d841e40aec8c84b9e76ba9cfbce67418adb172bd) from the checkout
unchanged; it needs the `fire` package only (Debian: python3-fire). The GPU named only sets
llm-analysis's batch-size search and warnings, not the figures kept here.
"""
import json
import logging
import sys

sys.path.insert(0, sys.argv[1])
from llm_analysis.analysis import ActivationRecomputation as AR  # noqa: E402
from llm_analysis.analysis import DSZeRO, LLMAnalysis  # noqa: E402
from llm_analysis.config import (DtypeConfig, ModelConfig, ParallelismConfig,  # noqa: E402
                                 get_gpu_config_by_name)

# llm-analysis has no biases, no position table and one (tied) embedding; the vocabulary given
# is the padded one each run holds.
LLAMA = dict(name="llama2-7b-shape", num_layers=32, n_head=32, hidden_dim=4096, vocab_size=32000,
             max_seq_len=4096, num_key_value_heads=32, ffn_embed_dim=11008,
             mlp_gated_linear_units=True)
GPT125 = dict(name="megatron-gpt-125m", num_layers=12, n_head=8, hidden_dim=512,
              vocab_size=50304, max_seq_len=1024, num_key_value_heads=8, ffn_embed_dim=2048)
GPT7B = dict(name="megatron-gpt3-7b-gqa", num_layers=32, n_head=32, hidden_dim=4096,
             vocab_size=131584, max_seq_len=8192, num_key_value_heads=8, ffn_embed_dim=16384)

# id: model, parallelism (sp_size 1 = no sequence parallelism; llm-analysis defaults it to tp),
# training() arguments. Megatron's distributed optimizer is llm-analysis's ZeRO-1 over dp.
RUNS = {
    "A7": (LLAMA, dict(tp_size=8, sp_size=8),
           dict(batch_size_per_gpu=1, seq_len=4096, flash_attn=True,
                activation_recomputation=AR.ATTN_COMPUTE)),
    "AG7": (GPT7B, dict(tp_size=4, sp_size=1, dp_size=2),
            dict(batch_size_per_gpu=2, seq_len=8192, gradient_accumulation_steps=2,
                 ds_zero=DSZeRO.STAGE_1, flash_attn=True)),
    "APP2": (GPT125, dict(pp_size=2, dp_size=4),
             dict(batch_size_per_gpu=4, seq_len=1024, gradient_accumulation_steps=2,
                  flash_attn=False, softmax_dropout=True)),
    # no context parallelism in llm-analysis: the whole sequence, then half of it
    "ACP2": (dict(GPT125, vocab_size=50432), dict(tp_size=2, sp_size=2, pp_size=2),
             dict(batch_size_per_gpu=4, seq_len=1024, gradient_accumulation_steps=8,
                  flash_attn=True)),
    "ACP2h": (dict(GPT125, vocab_size=50432), dict(tp_size=2, sp_size=2, pp_size=2),
              dict(batch_size_per_gpu=4, seq_len=512, gradient_accumulation_steps=8,
                   flash_attn=True)),
    "APP4": (LLAMA, dict(pp_size=4),
             dict(batch_size_per_gpu=1, seq_len=4096, gradient_accumulation_steps=8,
                  flash_attn=True)),
}
KEYS = ["weight_memory_per_gpu", "weight_memory_embedding_per_gpu", "gradient_memory_per_gpu",
        "optimizer_state_memory_per_gpu", "activation_memory_per_gpu",
        "activation_memory_attn_per_gpu", "activation_memory_mlp_per_gpu",
        "activation_memory_layernorm_per_gpu", "activation_memory_input_embedding_per_gpu",
        "activation_memory_output_embedding_per_gpu", "loss_bwd_memory",
        "estimated_bwd_prefetch_memory_per_gpu", "estimated_peak_memory_per_gpu"]


def main():
    logging.disable(logging.WARNING)
    out = {}
    for rid, (model, par, kw) in RUNS.items():
        a = LLMAnalysis(ModelConfig(**model), get_gpu_config_by_name("h100-sxm-80gb"),
                        DtypeConfig(), ParallelismConfig(**par))
        summary = a.training(**kw)
        out[rid] = {"num_params_total": a.total_num_params}
        out[rid].update({k: summary[k] for k in KEYS})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
