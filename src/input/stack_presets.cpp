// Training-stack presets: what Hugging Face, torchtune, LitGPT, torchtitan and Megatron-LM do by
// default, each default read from that project's code at a named commit (docs/stacks.md).
#include "input/stack_presets.hpp"

#include <array>

namespace memest {
namespace {

constexpr std::array kHf{
    StackDefault{"--attention", "sdpa",
                 "transformers: sdpa is the default attn_implementation with torch >= 2.1.1"},
    StackDefault{"--loss", "hf",
                 "transformers src/transformers/loss/loss_utils.py ForCausalLMLoss"},
    StackDefault{"--optimizer-impl", "foreach",
                 "transformers training_args.py: optim adamw_torch (torch.optim.AdamW, no flag)"},
    StackDefault{"--zero-grad", "none", "torch/optim/optimizer.py: zero_grad(set_to_none=True)"},
    StackDefault{"--lora-targets", "q,v", "peft src/peft/utils/constants.py: llama q_proj, v_proj",
                 "--lora-rank"},
};

constexpr std::array kTorchtune{
    StackDefault{"--attention", "sdpa",
                 "torchtune torchtune/modules/attention_utils.py @1814feb17"},
    StackDefault{"--optimizer-impl", "fused",
                 "torchtune recipes/configs/llama3_2/3B_lora_single_device.yaml @1814feb17"},
    StackDefault{"--recompute", "full",
                 "torchtune recipes/configs/*: enable_activation_checkpointing: True @1814feb17"},
    StackDefault{"--loss", "chunked",
                 "torchtune recipes/configs/llama3_2/*.yaml @1814feb17: CEWithChunkedOutputLoss"},
    StackDefault{"--zero-grad", "none",
                 "torchtune recipes/full_finetune_single_device.py @1814feb17"},
    StackDefault{"--lora-targets", "q,v,o,gate,up,down",
                 "torchtune recipes/configs/llama3_2/3B_lora_single_device.yaml @1814feb17",
                 "--lora-rank"},
    StackDefault{"--qlora-init", "chunked",
                 "torchtune torchtune/modules/peft/lora.py @1814feb17: to_nf4 of an nn.Linear "
                 "built on the device (torchao >= 0.2 quantises 2^20 elements at a time)",
                 "--qlora"},
    StackDefault{"--double-quant", "on",
                 "torchao torchao/dtypes/nf4tensor.py @6081796bc: from_tensor always "
                 "double-quantises the block scalers",
                 "--qlora"},
};

constexpr std::array kLitgpt{
    StackDefault{"--attention", "sdpa", "litgpt lit_gpt/model.py @8641822"},
    StackDefault{"--model-code", "litgpt",
                 "litgpt lit_gpt/model.py, rmsnorm.py and lora.py @8641822: its own modules"},
    StackDefault{"--optimizer-impl", "foreach",
                 "litgpt finetune/lora.py @8641822 (AdamW, no flag)"},
    StackDefault{"--zero-grad", "none", "litgpt finetune/lora.py @8641822 (optimizer.zero_grad())"},
    StackDefault{"--lora-targets", "q,v",
                 "litgpt finetune/lora.py @8641822: lora_query, lora_value", "--lora-rank"},
    StackDefault{"--lora-dropout", "0.05", "litgpt finetune/lora.py @8641822: lora_dropout = 0.05",
                 "--lora-rank"},
    StackDefault{"--loss", "chunked-tokens",
                 "litgpt finetune/lora.py @8641822: lm_head_chunk_size=128, chunked_cross_entropy"},
};

constexpr std::array kTorchtitan{
    StackDefault{"--attention", "sdpa", "torchtitan torchtitan/models/llama/model.py @9dec370"},
    StackDefault{"--loss", "hf", "torchtitan train.py @9dec370: cross_entropy(pred.float())"},
    StackDefault{"--optimizer-impl", "foreach",
                 "torchtitan torchtitan/optimizer.py @9dec370: foreach = not fused"},
    StackDefault{"--zero-grad", "none", "torchtitan train.py @9dec370 (optimizers.zero_grad())"},
};

constexpr std::array kMegatron{
    StackDefault{"--attention", "flash",
                 "Megatron-LM transformer_config.py @d98e8a64: attention_backend auto (TE)"},
    StackDefault{"--loss", "vocab-parallel",
                 "Megatron-LM megatron/core/tensor_parallel/cross_entropy.py @d98e8a64"},
    StackDefault{"--optimizer-impl", "fused",
                 "Megatron-LM megatron/core/optimizer/__init__.py @d98e8a64: TE FusedAdam"},
    StackDefault{"--grad-dtype", "fp32",
                 "Megatron-LM megatron/training/arguments.py @d98e8a64: bf16 accumulates and "
                 "reduces gradients in fp32"},
    StackDefault{"--zero-grad", "zero",
                 "Megatron-LM param_and_grad_buffer.py @d98e8a64: grad_data.zero_()"},
    StackDefault{"--ddp-bucket-view", "on",
                 "Megatron-LM param_and_grad_buffer.py @d98e8a64: main_grad views the buffer"},
    StackDefault{"--transformer-impl", "transformer_engine",
                 "Megatron-LM megatron/core/transformer/transformer_config.py @d98e8a64: "
                 "transformer_impl defaults to transformer_engine"},
    StackDefault{"--vocab-multiple", "128",
                 "Megatron-LM arguments.py @d98e8a64: --make-vocab-size-divisible-by 128"},
};

constexpr std::array kStacks{
    StackPreset{"hf", "Hugging Face transformers Trainer with PEFT", kHf},
    StackPreset{"torchtune", "torchtune recipes (Nov 2024 configs)", kTorchtune},
    StackPreset{"litgpt", "LitGPT finetune scripts", kLitgpt},
    StackPreset{"torchtitan", "torchtitan pre-training (Dec 2024)", kTorchtitan},
    StackPreset{"megatron", "Megatron-LM (Megatron-core)", kMegatron},
};

}  // namespace

std::span<const StackPreset> stack_presets() { return kStacks; }

std::span<const std::string_view> stack_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    out.reserve(kStacks.size());
    for (const auto& p : kStacks) out.push_back(p.name);
    return out;
  }();
  return names;
}

}  // namespace memest
