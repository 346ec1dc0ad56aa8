// Training-stack presets: what Hugging Face, torchtune, LitGPT, torchtitan and Megatron-LM do by
// default, each default read from that project's code at a named commit (docs/stacks.md).
#include "input/stack_presets.hpp"

#include "base/names.hpp"

#include <array>

namespace memest {
namespace {

constexpr std::array kHf{
    StackDefault{"--attention", "sdpa",
                 "transformers: sdpa is the default attn_implementation with torch >= 2.1.1"},
    StackDefault{"--loss",
                 "hf",
                 "transformers src/transformers/loss/loss_utils.py ForCausalLMLoss",
                 "",
                 {"transformers", "4.45", ""}},
    StackDefault{"--loss",
                 "hf-upcast",
                 "transformers before 4.45: LlamaForCausalLM.forward returns logits.float() and "
                 "shifts a .contiguous() copy for the loss (4.45 upcasts only under labels)",
                 "",
                 {"transformers", "", "4.45"}},
    StackDefault{"--optimizer-impl",
                 "foreach",
                 "transformers training_args.py: optim adamw_torch (torch.optim.AdamW, no flag), "
                 "the default since PR #25109 (July 2023, 4.32)",
                 "",
                 {"transformers", "4.32", ""}},
    StackDefault{"--optimizer-impl",
                 "single",
                 "transformers before 4.32: optim adamw_hf, transformers' own AdamW, a loop over "
                 "the parameters (PR #25109 made adamw_torch the default)",
                 "",
                 {"transformers", "", "4.32"}},
    StackDefault{"--zero-grad",
                 "none",
                 "torch/optim/optimizer.py: zero_grad(set_to_none=True)",
                 "",
                 {"torch", "2.0", ""}},
    StackDefault{"--zero-grad",
                 "zero",
                 "torch before 2.0: zero_grad(set_to_none=False) zeroes the gradients and keeps "
                 "them between steps (2.0 made set_to_none=True the default)",
                 "",
                 {"torch", "", "2.0"}},
    StackDefault{"--sdpa-enable-gqa",
                 "on",
                 "transformers from 4.54: sdpa_attention_forward passes k and v unrepeated with "
                 "enable_gqa=True when use_gqa_in_sdpa holds (torch >= 2.5, no attention mask; "
                 "src/transformers/integrations/sdpa_attention.py, PR #39412)",
                 "",
                 {"transformers", "4.54", ""}},
    StackDefault{"--softmax-keeps-input",
                 "on",
                 "torch before 1.11: softmax and log_softmax keep their input for backward "
                 "(pytorch/pytorch#64000, fixed by PR #65242 for 1.11)",
                 "",
                 {"torch", "", "1.11"}},
    StackDefault{"--qlora-keeps-input",
                 "on",
                 "bitsandbytes before 0.43.2: MatMul4Bit keeps the input of every 4-bit linear "
                 "(ctx.tensors = (A, B), dropped in PR #1270)",
                 "--qlora",
                 {"bitsandbytes", "", "0.43.2"}},
    StackDefault{"--lora-targets", "q,v", "peft src/peft/utils/constants.py: llama q_proj, v_proj",
                 "--lora-rank"},
    StackDefault{"--adapter-dtype",
                 "fp32",
                 "peft from 0.11: get_peft_model(autocast_adapter_dtype=True) upcasts fp16/bf16 "
                 "adapter weights to fp32 (src/peft/tuners/tuners_utils.py _cast_adapter_dtype, "
                 "PR #1706), and LoRA's forward casts each input to them (_cast_input_dtype)",
                 "--lora-rank",
                 {"peft", "0.11", ""}},
};

constexpr std::array kTorchtune{
    StackDefault{"--attention", "sdpa",
                 "torchtune torchtune/modules/attention_utils.py @1814feb17"},
    StackDefault{"--optimizer-impl",
                 "fused",
                 "torchtune recipes/configs/llama3_2/3B_lora_single_device.yaml @1814feb17",
                 "",
                 {"torchtune", "0.2", ""}},
    StackDefault{"--optimizer-impl",
                 "foreach",
                 "torchtune 0.1 recipes/configs/llama2/*.yaml @ff594c231: AdamW with no flag "
                 "(fused: True is in the configs of 1814feb17; memest takes 0.2 as the first "
                 "release with it)",
                 "",
                 {"torchtune", "", "0.2"}},
    StackDefault{"--recompute", "full",
                 "torchtune recipes/configs/*: enable_activation_checkpointing: True @1814feb17"},
    StackDefault{"--loss",
                 "chunked",
                 "torchtune recipes/configs/llama3_2/*.yaml @1814feb17: CEWithChunkedOutputLoss",
                 "",
                 {"torchtune", "0.2", ""}},
    StackDefault{"--loss",
                 "hf",
                 "torchtune 0.1 recipes @ff594c231: torch.nn.CrossEntropyLoss on output.float() "
                 "(CEWithChunkedOutputLoss is in the configs of 1814feb17; memest takes 0.2 as the "
                 "first release with it)",
                 "",
                 {"torchtune", "", "0.2"}},
    StackDefault{"--zero-grad", "none",
                 "torchtune recipes/full_finetune_single_device.py @1814feb17"},
    StackDefault{"--lora-targets", "q,v,o,gate,up,down",
                 "torchtune recipes/configs/llama3_2/3B_lora_single_device.yaml @1814feb17",
                 "--lora-rank"},
    StackDefault{"--lora-dropout",
                 "0.05",
                 "torchtune before 0.3: the LoRA builders default lora_dropout to 0.05 "
                 "(torchtune/models/llama2/_model_builders.py @ff594c231; PR #1492 set 0.0)",
                 "--lora-rank",
                 {"torchtune", "", "0.3"}},
    StackDefault{"--qlora-init",
                 "chunked",
                 "torchtune torchtune/modules/peft/lora.py @1814feb17: to_nf4 of an nn.Linear "
                 "built on the device (torchao >= 0.2 quantises 2^20 elements at a time)",
                 "--qlora",
                 {"torchao", "0.2", ""}},
    StackDefault{"--qlora-init",
                 "whole",
                 "torchao 0.1 (pinned by torchtune @0914d5cfb): NF4Tensor.from_tensor quantises "
                 "each base weight whole on the device",
                 "--qlora",
                 {"torchao", "", "0.2"}},
    StackDefault{"--double-quant", "on",
                 "torchao torchao/dtypes/nf4tensor.py @6081796bc: from_tensor always "
                 "double-quantises the block scalers",
                 "--qlora"},
    StackDefault{"--layer-clones",
                 "on",
                 "torchtune torchtune/models/llama2/_component_builders.py @0914d5cfb to "
                 "@1814feb17: one decoder layer deep-copied num_layers times (_get_clones)",
                 "",
                 {},
                 "llama-2"},
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
    StackDefault{"--output-fp32", "on",
                 "lightning src/lightning/fabric/wrappers.py @2.1.0.rc0: _FabricModule.forward "
                 "returns precision.convert_output(output), the floating outputs cast to "
                 "torch.get_default_dtype(), fp32 (plugins/precision/half.py; 1.9 to 2.6)"},
    StackDefault{"--fsdp-orig-params", "on",
                 "lightning src/lightning/fabric/strategies/fsdp.py: FSDPStrategy sets "
                 "use_orig_params=True (torch >= 2.0)",
                 "--fsdp"},
    StackDefault{"--load-full",
                 "on",
                 "lightning FSDPStrategy.module_init_context: empty_init builds on the meta "
                 "device only with torch >= 2.1; before, fabric.init_module builds the whole model "
                 "on every GPU",
                 "--fsdp",
                 {"torch", "", "2.1"}},
    StackDefault{"--fsdp-no-sync", "on",
                 "litgpt finetune/lora.py @8641822: fabric.no_backward_sync(model, "
                 "enabled=is_accumulating), FSDP's no_sync() over the micro-batches",
                 "--fsdp,--grad-accum"},
    StackDefault{"--qlora-keeps-input",
                 "on",
                 "bitsandbytes before 0.43.2: MatMul4Bit keeps the input of every 4-bit linear "
                 "(ctx.tensors = (A, B), dropped in PR #1270)",
                 "--qlora",
                 {"bitsandbytes", "", "0.43.2"}},
};

constexpr std::array kTorchtitan{
    StackDefault{"--attention", "sdpa", "torchtitan torchtitan/models/llama/model.py @9dec370"},
    StackDefault{"--loss", "hf", "torchtitan train.py @9dec370: cross_entropy(pred.float())"},
    StackDefault{"--optimizer-impl", "foreach",
                 "torchtitan torchtitan/optimizer.py @9dec370: foreach = not fused"},
    StackDefault{"--zero-grad", "none", "torchtitan train.py @9dec370 (optimizers.zero_grad())"},
    StackDefault{"--fsdp-param-dtype", "bf16",
                 "torchtitan torchtitan/config_manager.py @9dec370: mixed_precision_param "
                 "bfloat16 (FSDP2 MixedPrecisionPolicy)",
                 "--fsdp"},
    StackDefault{"--fsdp-reduce-dtype", "fp32",
                 "torchtitan torchtitan/config_manager.py @9dec370: mixed_precision_reduce float32",
                 "--fsdp"},
    StackDefault{"--moe-dispatcher",
                 "torchtitan",
                 "torchtitan torchtitan/models/common/moe.py @b5bcd76c6: MoE with "
                 "TokenChoiceTopKRouter, GroupedExperts and the standard token dispatcher "
                 "(config_utils.py make_token_dispatcher_config)",
                 "",
                 {},
                 {},
                 true},
};

constexpr std::array kFsdpQlora{
    StackDefault{"--recompute", "full",
                 "fsdp_qlora train.py @50efa1e: reentrant checkpointing per decoder layer"},
    StackDefault{"--lora-dropout", "0.1", "fsdp_qlora train.py @50efa1e: lora_dropout 0.1",
                 "--lora-rank"},
    StackDefault{"--loss",
                 "hf",
                 "transformers src/transformers/loss/loss_utils.py ForCausalLMLoss",
                 "",
                 {"transformers", "4.45", ""}},
    StackDefault{"--loss",
                 "hf-upcast",
                 "transformers before 4.45: LlamaForCausalLM.forward returns logits.float() and "
                 "shifts a .contiguous() copy for the loss (4.45 upcasts only under labels)",
                 "",
                 {"transformers", "", "4.45"}},
    StackDefault{"--loop-keeps-output", "on",
                 "fsdp_qlora train.py @50efa1e: `output = model(...)` held through "
                 "loss.backward() until the next forward returns (lines 821-843)"},
    StackDefault{"--fsdp-sync-module-states", "on",
                 "fsdp_qlora train.py @50efa1e: low_memory loading, rank 0 loads to the CPU, the "
                 "others build on the meta device, FSDP sync_module_states=True",
                 "--fsdp"},
    StackDefault{"--qlora-keeps-input",
                 "on",
                 "bitsandbytes before 0.43.2: MatMul4Bit keeps the input of every 4-bit linear "
                 "(ctx.tensors = (A, B), dropped in PR #1270)",
                 "--qlora",
                 {"bitsandbytes", "", "0.43.2"}},
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
    StackDefault{"--moe-dispatcher",
                 "allgather",
                 "Megatron-LM megatron/core/transformer/transformer_config.py @d98e8a64: "
                 "moe_token_dispatcher_type \"allgather\"",
                 "",
                 {},
                 {},
                 true},
};

constexpr std::array kStacks{
    StackPreset{"hf", "Hugging Face transformers Trainer with PEFT", kHf},
    StackPreset{"torchtune", "torchtune recipes (Nov 2024 configs)", kTorchtune},
    StackPreset{"litgpt", "LitGPT finetune scripts", kLitgpt},
    StackPreset{"torchtitan", "torchtitan pre-training (Dec 2024)", kTorchtitan},
    StackPreset{"megatron", "Megatron-LM (Megatron-core)", kMegatron},
    StackPreset{"fsdp-qlora", "Answer.AI's fsdp_qlora train.py", kFsdpQlora},
};

}  // namespace

std::span<const StackPreset> stack_presets() { return kStacks; }

constexpr auto kStackNames = detail::row_names(kStacks);

std::span<const std::string_view> stack_names() { return kStackNames; }

}  // namespace memest
