// The run options: every flag with its run-config key, the form of its value, its names and its
// default, and how flags are laid over a file. The option table is what the CLI, the run-config
// loader, the schema, the Python keywords and the JSON echo are generated from; the rules between
// options are in option_rules.cpp.
#include "input/stack_presets.hpp"
#include "input/versions.hpp"
#include "model/adapters.hpp"

#include <memest/error.hpp>
#include <memest/hardware.hpp>
#include <memest/hf_config.hpp>
#include <memest/optimizer.hpp>
#include <memest/precision.hpp>
#include <memest/run_options.hpp>
#include <memest/run_spec.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace memest {
namespace {

using Names = std::span<const std::string_view> (*)();

constexpr std::array<std::string_view, 4> kFsdpModeNames = {"full", "hybrid", "grad-op",
                                                            "no-shard"};
constexpr std::array<std::string_view, 2> kZeroGradNames = {"none", "zero"};
constexpr std::array<std::string_view, 3> kOffloadNames = {"optimizer", "params", "activations"};
constexpr std::array<std::string_view, 4> kZeroStageNames = {"0", "1", "2", "3"};
constexpr std::array<std::string_view, 2> kFsdpVersionNames = {"1", "2"};
// The LoRA adapters' dtype: the base parameters' (base) or their own.
constexpr std::array<std::string_view, 4> kAdapterDtypeNames = {"base", "fp32", "bf16", "fp16"};

// A dtype, or none (no master weights, no working copies, no accumulation buffer).
std::span<const std::string_view> optional_dtype_names() {
  static const std::vector<std::string_view> out = [] {
    std::vector<std::string_view> v = {"none"};
    for (const auto n : dtype_names()) v.push_back(n);
    return v;
  }();
  return out;
}

// The model presets by name (a --model may also be a Hub id, which is not listed).
std::span<const std::string_view> preset_names() {
  static const std::vector<PresetInfo> presets = model_presets();
  static const std::vector<std::string_view> out = [] {
    std::vector<std::string_view> v;
    v.reserve(presets.size());
    for (const auto& p : presets) v.push_back(p.name);
    return v;
  }();
  return out;
}

std::span<const std::string_view> gpu_names() {
  static const std::vector<std::string_view> out = [] {
    std::vector<std::string_view> v;
    for (const auto& g : gpu_presets()) v.push_back(g.name);
    return v;
  }();
  return out;
}

// The stated CUDA contexts --context-reserve takes by name.
std::span<const std::string_view> context_names() {
  static const std::vector<std::string_view> out = [] {
    std::vector<std::string_view> v;
    for (const auto& c : cuda_context_presets()) v.push_back(c.name);
    return v;
  }();
  return out;
}

// An optimizer's own name for an alias ("momentum" is "sgd-momentum").
std::string canonical_optimizer(std::string_view v) {
  try {
    return std::string(optimizer_name(parse_optimizer(v)));
  } catch (const Error&) {
    return std::string(v);
  }
}

std::string names(std::span<const std::string_view> list) {
  return fmt::format("{}", fmt::join(list, ", "));
}

// data table: one row per option, in --help order
std::vector<RunOptionInfo> build_table() {
  using R = RunOptions;
  using K = ValueKind;
  const std::string dtypes = names(dtype_names());
  const OptionDefault off;  // no value: the option is simply not in effect
  auto text = [](std::string flag, std::string section, std::string key, std::string type,
                 std::string help, TextSetting R::*member, K kind, OptionDefault fallback,
                 Names choices = nullptr) {
    RunOptionInfo r{std::move(flag), std::move(section), std::move(key),
                    std::move(type), std::move(help),    member};
    r.kind = kind;
    r.fallback = fallback;
    r.choices = choices;
    return r;
  };
  auto boolean = [](std::string flag, std::string section, std::string key, std::string help,
                    FlagSetting R::*member) {
    RunOptionInfo r{
        std::move(flag), std::move(section), std::move(key), "", std::move(help), nullptr, member};
    r.fallback = {"false", ""};
    return r;
  };
  // Another spelling of `of`: read by resolve(), never written by the echo.
  auto alias = [](RunOptionInfo r, std::string_view of) {
    r.alias_of = of;
    return r;
  };
  auto with_alone = [](RunOptionInfo r, std::vector<std::string_view> alone) {
    r.alone = std::move(alone);
    return r;
  };
  auto with_canonical = [](RunOptionInfo r, std::string (*canonical)(std::string_view)) {
    r.canonical = canonical;
    return r;
  };
  return {
      text("--params", "model", "params", "COUNT",
           "Parameter count: 7B, 6.7B, 125M, 1.3e9, 6738415616", &R::params, K::param_count, off),
      text("--model", "model", "name", "NAME",
           "A preset or a Hub id (org/name; else read from the local HF cache): 'memest models'",
           &R::model, K::name, off, preset_names),
      text("--config", "model", "config", "PATH", "A Hugging Face config.json", &R::config, K::path,
           off),
      text("--architecture", "model", "architecture", "JSON",
           "A Hugging Face config.json given inline (in a run config: a JSON object)",
           &R::architecture, K::json, off),
      text("--freeze", "model", "freeze", "ROLES",
           "Freeze parameter roles, comma-separated: " + names(role_names()), &R::freeze, K::list,
           off, role_names),
      text("--lora-rank", "model", "lora_rank", "R", "Train LoRA adapters of rank R; base frozen",
           &R::lora_rank, K::count, off),
      text("--lora-targets", "model", "lora_targets", "LIST",
           "LoRA targets: q,k,v,o,gate,up,down or all-linear (default q,v)", &R::lora_targets,
           K::list, {"q,v", ""}, lora_target_names),
      text("--lora-dropout", "model", "lora_dropout", "P",
           "Dropout on the LoRA input (default 0 as PEFT; LitGPT 0.05, fsdp_qlora 0.1)",
           &R::lora_dropout, K::probability, {"0", ""}),
      text("--adapter-dtype", "model", "adapter_dtype", "DTYPE",
           "Dtype of the LoRA adapters, their gradients and optimizer states: base (the "
           "parameters', the default), fp32, bf16 or fp16 (PEFT from 0.11 upcasts fp16/bf16 "
           "adapters to fp32, autocast_adapter_dtype=True, and each adapter casts its input to "
           "them)",
           &R::adapter_dtype, K::choice, {"base", ""}, adapter_dtype_names),
      boolean("--qlora", "model", "qlora", "QLoRA: 4-bit NF4 base weights (needs --lora-rank)",
              &R::qlora),
      boolean("--double-quant", "model", "double_quant",
              "QLoRA: quantize the quantization constants too", &R::double_quant),
      boolean("--qlora-keeps-input", "model", "qlora_keeps_input",
              "QLoRA with bitsandbytes before 0.43.2: each 4-bit linear keeps its input",
              &R::qlora_keeps_input),
      alias(
          text(
              "--qlora-init", "model", "qlora_init", "NAME",
              "QLoRA: where the base weights become NF4: none (they arrive quantised, the "
              "default), "
              "whole (built in 16 bits on the GPU, quantised at once, and quantised again there as "
              "the checkpoint loads: torchtune with torchao 0.1) or chunked (the same, 2^20 "
              "elements at a time: torchao >= 0.5); with --allocator cuda, the set-up stretch of "
              "the replay",
              &R::qlora_init, K::choice, {"none", ""}, qlora_init_names),
          "--model-loading"),
      text("--model-code", "model", "model_code", "NAME",
           "Whose modelling code runs the model: hf (transformers', the default) or litgpt "
           "(LitGPT's: RMSNorm in the model's dtype, one fused qkv linear whose LoRA has one "
           "dropout, F.gelu)",
           &R::model_code, K::choice, {"hf", ""}, model_code_names),
      alias(boolean(
                "--layer-clones", "model", "layer_clones",
                "The model is built on the GPU as one decoder layer deep-copied num_layers times, "
                "that layer then freed (torchtune's Llama-2 builders); with --qlora-init each copy "
                "is quantised again; with --allocator cuda, the set-up stretch of the replay",
                &R::layer_clones),
            "--model-loading"),
      text("--model-loading", "model", "loading", "NAME",
           "How the model reaches the device: none (as stored, the default), layer-clones "
           "(--layer-clones), nf4-whole or nf4-chunked (--qlora-init whole or chunked), "
           "layer-clones,nf4-whole or layer-clones,nf4-chunked (both, as torchtune's QLoRA "
           "builders), fsdp-sync (--fsdp-sync-module-states) or full (--load-full); with "
           "--allocator cuda, the set-up stretch of the replay",
           &R::model_loading, K::choice, {"none", ""}, model_loading_names),
      with_canonical(text("--optimizer", "optimizer", "name", "NAME",
                          "Optimizer: " + names(optimizer_names()) + " (default adamw)",
                          &R::optimizer, K::choice, {"adamw", ""}, optimizer_names),
                     canonical_optimizer),
      boolean("--nesterov", "optimizer", "nesterov", "sgd-momentum: Nesterov momentum (same state)",
              &R::nesterov),
      boolean("--amsgrad", "optimizer", "amsgrad", "adam/adamw: keep max_exp_avg_sq", &R::amsgrad),
      boolean("--rmsprop-momentum", "optimizer", "momentum", "rmsprop: keep a momentum buffer",
              &R::rmsprop_momentum),
      boolean("--centered", "optimizer", "centered", "rmsprop: keep grad_avg (centered)",
              &R::centered),
      boolean("--first-moment", "optimizer", "first_moment", "adafactor: keep exp_avg (beta1 set)",
              &R::first_moment),
      text("--optimizer-impl", "optimizer", "impl", "NAME",
           "How the step runs: foreach (PyTorch's default on CUDA), single or fused",
           &R::optimizer_impl, K::choice, {"foreach", ""}, optimizer_impl_names),
      alias(boolean("--fused-optimizer", "optimizer", "fused",
                    "Short for --optimizer-impl fused (fused/capturable: no step temporaries, step "
                    "counters "
                    "in device memory)",
                    &R::fused_optimizer),
            "--optimizer-impl"),
      boolean("--paged-optimizer", "optimizer", "paged",
              "bitsandbytes' paged optimizer (PagedAdamW, PagedAdamW8bit): states in CUDA unified "
              "memory, reported apart from the device peak",
              &R::paged_optimizer),
      boolean("--optimizer-in-backward", "optimizer", "in_backward",
              "The optimizer step fused into backward (torchtune optimizer_in_bwd): each "
              "gradient applied and freed as soon as it is accumulated",
              &R::optimizer_in_backward),
      text("--precision", "precision", "preset", "NAME",
           "Precision policy: " + names(precision_names()) + " (default fp32)", &R::precision,
           K::choice, {"fp32", ""}, precision_names),
      alias(boolean("--amp", "precision", "amp", "Short for --precision amp (torch.autocast fp16)",
                    &R::amp),
            "--precision"),
      text("--param-dtype", "precision", "param_dtype", "DTYPE",
           "Dtype of stored parameters: " + dtypes, &R::param_dtype, K::choice,
           {"", "the precision preset"}, dtype_names),
      text("--grad-dtype", "precision", "grad_dtype", "DTYPE", "Dtype of gradients", &R::grad_dtype,
           K::choice, {"", "the precision preset"}, dtype_names),
      text("--master-dtype", "precision", "master_dtype", "DTYPE",
           "Dtype of master weights, or none", &R::master_dtype, K::choice,
           {"", "the precision preset"}, optional_dtype_names),
      text("--state-dtype", "precision", "state_dtype", "DTYPE", "Dtype of optimizer states",
           &R::state_dtype, K::choice, {"", "the precision preset"}, dtype_names),
      text("--activation-dtype", "precision", "activation_dtype", "DTYPE", "Dtype of activations",
           &R::activation_dtype, K::choice, {"", "the precision preset"}, dtype_names),
      text("--working-dtype", "precision", "working_dtype", "DTYPE",
           "Dtype of autocast weight copies, or none", &R::working_dtype, K::choice,
           {"", "the precision preset"}, optional_dtype_names),
      text("--grad-accum-dtype", "precision", "grad_accum_dtype", "DTYPE",
           "Dtype of a separate gradient accumulation buffer, or none", &R::grad_accum_dtype,
           K::choice, {"", "the precision preset"}, optional_dtype_names),
      text("--batch", "training", "micro_batch", "N",
           "Micro-batch size (sequences per forward pass)", &R::batch, K::count, off),
      text("--seq", "training", "seq_len", "N", "Sequence length in tokens", &R::seq, K::count,
           off),
      text("--grad-accum", "training", "grad_accum", "N",
           "Micro-batches per optimizer step (default 1)", &R::grad_accum, K::count, {"1", ""}),
      text("--attention", "training", "attention", "NAME",
           "Attention: " + names(attention_names()) + " (default sdpa, as transformers uses)",
           &R::attention, K::choice, {"sdpa", ""}, attention_names),
      text("--recompute", "training", "recompute", "NAME",
           "Activation recompute: " + names(recompute_names()) +
               " (default none; op: torchtitan's per-op selective checkpointing)",
           &R::recompute, K::choice, {"none", ""}, recompute_names),
      boolean("--compile", "training", "compile",
              "torch.compile of each layer: pointwise results recomputed in backward, not saved "
              "(an approximation of Inductor's partitioner)",
              &R::compile),
      text("--stack", "training", "stack", "NAME",
           "Training stack whose defaults the run takes (flags override them): " +
               names(stack_names()) + " (docs/stacks.md)",
           &R::stack, K::choice, off, stack_names),
      text("--versions", "training", "versions", "LIST",
           "Versions of the stack's packages, as PACKAGE=VERSION,...: " +
               names(versioned_packages()) +
               "; they decide the stack's defaults that changed over time (a package not given: "
               "its newest behaviour; docs/stacks.md)",
           &R::versions, K::versions, off),
      text("--transformer-impl", "training", "transformer_impl", "NAME",
           "Layers as Megatron-LM's --transformer-impl names them: local (PyTorch modules, the "
           "default) or transformer_engine (TE layers, which keep their own cuBLAS workspace: "
           "32 MiB + 1 KiB from sm90 on, 4 MiB before; with --allocator cuda)",
           &R::transformer_impl, K::choice, {"local", ""}, transformer_impl_names),
      text("--loss", "training", "loss", "NAME",
           "Loss over the vocabulary: " + names(loss_names()) +
               " (default hf: transformers'; vocab-parallel: Megatron-LM's; chunked: torchtune's "
               "CEWithChunkedOutputLoss; chunked-tokens: LitGPT's chunked_cross_entropy; "
               "hf-upcast: transformers before 4.45, fp32 logits returned and a shifted copy)",
           &R::loss, K::choice, {"hf", ""}, loss_names),
      boolean("--loop-keeps-output", "training", "loop_keeps_output",
              "The training loop holds the model's output (output = model(...)) from one "
              "forward to the next: its logits live through backward and the next forward",
              &R::loop_keeps_output),
      boolean("--output-fp32", "training", "output_fp32",
              "The training loop gets the model's floating outputs cast to fp32 (Lightning "
              "Fabric: _FabricModule.forward's precision.convert_output): the logits, the "
              "loss's log-probs and their gradients in fp32",
              &R::output_fp32),
      boolean("--sdpa-enable-gqa", "training", "sdpa_enable_gqa",
              "transformers from 4.54 (with torch >= 2.5): k and v reach SDPA unrepeated "
              "(enable_gqa), and PyTorch picks the kernel: flash or cuDNN for fp16/bf16 (what "
              "--attention flash keeps), for fp32 the memory-efficient one or, with grouped "
              "k/v heads or on a GPU before sm80, the math backend (what eager keeps)",
              &R::sdpa_enable_gqa),
      boolean("--softmax-keeps-input", "training", "softmax_keeps_input",
              "PyTorch before 1.11: softmax and log_softmax keep their input for backward "
              "besides their output (the attention scores, the loss's logits)",
              &R::softmax_keeps_input),
      text("--loss-chunk", "training", "loss_chunk", "N",
           "--loss chunked: chunks of the sequence (default 8); chunked-tokens: positions per "
           "chunk (default 128)",
           &R::loss_chunk, K::count,
           {"", "--loss: 8 chunks for chunked, 128 positions for chunked-tokens"}),
      text("--dropout", "training", "dropout", "P", "Override every dropout probability",
           &R::dropout, K::probability, {"", "the model's config"}),
      text("--zero-grad", "training", "zero_grad", "MODE",
           "zero_grad: none (set_to_none, the default) or zero (grads kept between steps)",
           &R::zero_grad, K::choice, {"none", ""}, zero_grad_names),
      text("--device", "training", "device", "NAME",
           "Kernels that decide saved tensors and scratch: " + names(device_names()) +
               " (default cuda; cpu as in the reference measurements)",
           &R::device, K::choice, {"cuda", ""}, device_names),
      text("--dp", "parallel", "data_parallel", "N",
           "Data-parallel ranks the model states are sharded over (with --zero)", &R::data_parallel,
           K::count, {"1", ""}),
      text("--zero", "parallel", "zero_stage", "STAGE",
           "ZeRO stage: 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (FSDP)",
           &R::zero_stage, K::choice, {"", "--fsdp or --distributed-optimizer, else 0"},
           zero_stage_names),
      text("--fsdp", "parallel", "fsdp", "MODE",
           "FSDP sharding as PyTorch names it: full (ZeRO-3), hybrid (full within --fsdp-group, "
           "replicated across), grad-op (ZeRO-2), no-shard (DDP), over the --dp ranks",
           &R::fsdp, K::choice, off, fsdp_mode_names),
      text("--fsdp-version", "parallel", "fsdp_version", "N",
           "With --fsdp: 1 FullyShardedDataParallel (flat parameters per unit, the default), "
           "2 fully_shard (each parameter sharded on dim 0)",
           &R::fsdp_version, K::choice, {"1", ""}, fsdp_version_names),
      text("--fsdp-group", "parallel", "fsdp_group", "N",
           "With --fsdp hybrid: the ranks one replica is sharded over (a node, e.g. 8)",
           &R::fsdp_group, K::count, off),
      text("--fsdp-param-dtype", "parallel", "fsdp_param_dtype", "DTYPE",
           "FSDP MixedPrecision param_dtype: parameters all-gathered and computed in it "
           "(activations too, unless --activation-dtype); default the stored dtype",
           &R::fsdp_param_dtype, K::choice, {"", "the stored parameters' dtype"}, dtype_names),
      text("--fsdp-reduce-dtype", "parallel", "fsdp_reduce_dtype", "DTYPE",
           "FSDP MixedPrecision reduce_dtype: the gradients' reduce-scatter dtype (default "
           "param_dtype)",
           &R::fsdp_reduce_dtype, K::choice, {"", "--fsdp-param-dtype"}, dtype_names),
      boolean("--fsdp-orig-params", "parallel", "fsdp_orig_params",
              "FSDP1 use_orig_params=True: frozen and trainable parameters in one flat "
              "parameter per unit, whose gradient covers all of it",
              &R::fsdp_orig_params),
      boolean("--fsdp-no-sync", "parallel", "fsdp_no_sync",
              "FSDP's no_sync() over the micro-batches of --grad-accum (LitGPT's "
              "no_backward_sync): each unit keeps its whole unsharded gradient between them",
              &R::fsdp_no_sync),
      alias(boolean("--fsdp-sync-module-states", "parallel", "fsdp_sync_module_states",
                    "FSDP1 sync_module_states=True on a model held on the host: unit by unit, its "
                    "parameters are moved to the GPU, broadcast from rank 0, flattened and sharded "
                    "(with --allocator cuda: the set-up stretch of the replay)",
                    &R::fsdp_sync_module_states),
            "--model-loading"),
      boolean("--distributed-optimizer", "parallel", "distributed_optimizer",
              "Megatron's distributed optimizer: fp32 main parameters and optimizer states "
              "sharded over the --dp ranks (ZeRO-1)",
              &R::distributed_optimizer),
      boolean("--ddp-bucket-view", "parallel", "ddp_bucket_view",
              "DDP with gradient_as_bucket_view=True (or Megatron's DDP): no second copy of the "
              "gradients in the all-reduce buckets",
              &R::ddp_bucket_view),
      alias(boolean("--load-full", "parallel", "load_full",
                    "Model loading materialises the whole model on every GPU before sharding it "
                    "(with --allocator cuda: the set-up stretch of the replay)",
                    &R::load_full),
            "--model-loading"),
      text("--tp", "parallel", "tensor_parallel", "N",
           "Tensor-parallel ranks: heads, kv heads, MLP width and vocabulary split N ways",
           &R::tensor_parallel, K::count, {"1", ""}),
      boolean("--sp", "parallel", "sequence_parallel",
              "Sequence parallelism: norms, dropouts and residuals split over the --tp ranks",
              &R::sequence_parallel),
      text("--pp", "parallel", "pipeline_parallel", "N",
           "Pipeline stages: the layers split N ways, 1F1B schedule (each stage reported)",
           &R::pipeline_parallel, K::count, {"1", ""}),
      text("--vpp", "parallel", "virtual_stages", "N",
           "Model chunks per pipeline rank: Megatron's interleaved 1F1B schedule",
           &R::virtual_stages, K::count, {"1", ""}),
      text("--microbatches", "parallel", "microbatches", "N",
           "Micro-batches per step on the pipeline (default: --grad-accum)", &R::microbatches,
           K::count, {"", "--grad-accum"}),
      text("--pp-schedule", "parallel", "pp_schedule", "NAME",
           "Pipeline schedule, torchtitan's names: " + names(pipe_schedule_names()) +
               " (default 1f1b, interleaved-1f1b with --vpp)",
           &R::pp_schedule, K::choice, {"", "--vpp: 1f1b, or interleaved-1f1b with --vpp"},
           pipe_schedule_names),
      text("--pp-microbatch-group", "parallel", "pp_microbatch_group", "N",
           "Micro-batches the interleaved schedule runs through a model chunk before the next "
           "(Megatron's --microbatch-group-size-per-virtual-pipeline-stage; default --pp)",
           &R::pp_microbatch_group, K::count, {"", "--pp"}),
      text("--first-stage-layers", "parallel", "first_stage_layers", "N",
           "Layers of the first pipeline stage, the rest split evenly (Megatron's "
           "--decoder-first-pipeline-num-layers)",
           &R::first_stage_layers, K::count, {"", "--pp: an even share"}),
      text("--last-stage-layers", "parallel", "last_stage_layers", "N",
           "Layers of the last pipeline stage, the rest split evenly (Megatron's "
           "--decoder-last-pipeline-num-layers)",
           &R::last_stage_layers, K::count, {"", "--pp: an even share"}),
      text("--cp", "parallel", "context_parallel", "N",
           "Context-parallel ranks: the sequence split N ways (ring attention)",
           &R::context_parallel, K::count, {"1", ""}),
      text("--ep", "parallel", "expert_parallel", "N",
           "Expert-parallel ranks: the routed experts split N ways", &R::expert_parallel, K::count,
           {"1", ""}),
      text("--moe-dispatcher", "parallel", "moe_dispatcher", "NAME",
           "How routed tokens reach their experts: hf (the model code's MoE layer), alltoall or "
           "allgather (Megatron-LM's all-to-all or all-gather token dispatcher, grouped experts), "
           "torchtitan (torchtitan's MoE layer and token dispatcher)",
           &R::moe_dispatcher, K::choice, {"", "hf: the model code's MoE layer"},
           moe_dispatcher_names),
      text("--moe-routing", "parallel", "moe_routing", "NAME",
           "What a dropless token dispatcher's rank receives: balanced (its share, N x top_k "
           "rows) or worst (every token of the expert-parallel group sent to its experts)",
           &R::moe_routing, K::choice, {"balanced", ""}, moe_routing_names),
      text("--moe-capacity-factor", "parallel", "moe_capacity_factor", "C",
           "Megatron-LM's --moe-expert-capacity-factor: each expert takes at most C x its even "
           "share of the routed tokens (default: dropless)",
           &R::moe_capacity_factor, K::number, {"", "dropless"}),
      text("--vocab-multiple", "parallel", "vocab_multiple", "N",
           "Pad the vocabulary to a multiple of N x tp (Megatron's "
           "--make-vocab-size-divisible-by, 128 there; default 1)",
           &R::vocab_multiple, K::count, {"1", ""}),
      with_alone(
          text(
              "--offload", "parallel", "offload", "WHAT",
              "none, or a comma-separated list of: optimizer: master weights and optimizer states "
              "in host memory, stepped on the CPU (ZeRO-Offload); params: with ZeRO-3 also the "
              "parameter and gradient shards (ZeRO-Infinity, FSDP CPU offload); activations: saved "
              "tensors in host memory (torchtune's activation offloading)",
              &R::offload, K::list, {"none", ""}, offload_names),
          {"none"}),
      text("--allocator", "hardware", "allocator", "NAME",
           "none (bytes requested) or cuda (PyTorch's caching allocator replayed: allocated "
           "and reserved bytes)",
           &R::allocator, K::choice, {"none", ""}, allocator_names),
      text("--context-reserve", "hardware", "context_reserve", "SIZE|NAME",
           "The CUDA context, a stated constant added to the peak: a size or a measured one "
           "(v100-cuda11.2); with --allocator cuda, nvidia-smi = reserved + it",
           &R::context_reserve, K::size, off, context_names),
      text("--gpu", "hardware", "gpu", "NAME", "A GPU preset (see 'memest gpus')", &R::gpu,
           K::choice, off, gpu_names),
      text("--budget", "hardware", "budget", "SIZE", "Memory budget per device: 80GiB, 40GB, ...",
           &R::budget, K::size, off),
      text("--reserve", "hardware", "reserve", "SIZE",
           "Memory kept back for the CUDA context and allocator", &R::reserve, K::size,
           {"", "the GPU preset (1 GiB), 0 with --budget or --context-reserve"}),
  };
}

}  // namespace

const std::vector<RunOptionInfo>& run_option_table() {
  static const std::vector<RunOptionInfo> table = build_table();
  return table;
}

const RunOptionInfo& run_option(std::string_view flag) {
  const auto& table = run_option_table();
  const auto it =
      std::find_if(table.begin(), table.end(), [&](const auto& i) { return i.flag == flag; });
  if (it == table.end()) throw Error(fmt::format("no run option {}", flag));
  return *it;
}

namespace {

// Choices that are numbers (--zero 3, --fsdp-version 2), which a run config may give as JSON
// numbers. std::all_of, not std::ranges::all_of: the web build's libc++ 14 has no ranges
// algorithms.
bool numbered_choices(const RunOptionInfo& info) {
  if (!info.choices) return false;
  const auto names = info.choices();
  return std::all_of(names.begin(), names.end(), [](std::string_view n) {
    return !n.empty() &&
           std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
  });
}

}  // namespace

bool takes_number(const RunOptionInfo& info) {
  switch (info.kind) {
    case ValueKind::count:
    case ValueKind::param_count:
    case ValueKind::size:
    case ValueKind::probability:
    case ValueKind::number:
    case ValueKind::fraction:
      return true;
    case ValueKind::choice:  // --zero 3, --fsdp-version 2
      return numbered_choices(info);
    default:
      return false;
  }
}

bool given(const RunOptions& o, const RunOptionInfo& info) {
  if (info.text) return static_cast<bool>(o.*info.text);
  const auto& on = o.*info.boolean;
  return on && on->value;
}

bool stated(const RunOptions& o, const RunOptionInfo& info) {
  return info.text ? (o.*info.text).has_value() : (o.*info.boolean).has_value();
}

std::optional<std::string> effective_value(const RunOptions& o, const RunOptionInfo& info) {
  if (info.boolean) {
    const auto& s = o.*info.boolean;
    if (s) return s->value ? "true" : "false";
  } else if (const auto& s = o.*info.text) {
    return info.canonical ? info.canonical(s->value) : s->value;
  }
  if (info.fallback.value.empty()) return std::nullopt;
  return std::string(info.fallback.value);
}

void merge(RunOptions& b, const RunOptions& o) {
  if (o.params || o.model || o.config || o.architecture) {  // a later model replaces the earlier
    b.params.reset();
    b.model.reset();
    b.config.reset();
    b.architecture.reset();
  }
  for (const auto& info : run_option_table()) {
    if (info.text && o.*info.text) b.*info.text = o.*info.text;
    if (info.boolean && o.*info.boolean) b.*info.boolean = o.*info.boolean;
  }
}

std::string_view value_kind_name(ValueKind kind) {
  static constexpr std::array<std::string_view, 14> kNames = {
      "flag", "count", "param_count", "size",     "probability", "choice",   "list",
      "json", "path",  "name",        "versions", "number",      "fraction", "text"};
  return kNames[static_cast<std::size_t>(kind)];
}

std::span<const std::string_view> fsdp_mode_names() { return kFsdpModeNames; }
std::span<const std::string_view> adapter_dtype_names() { return kAdapterDtypeNames; }
std::span<const std::string_view> zero_grad_names() { return kZeroGradNames; }
std::span<const std::string_view> offload_names() { return kOffloadNames; }
std::span<const std::string_view> zero_stage_names() { return kZeroStageNames; }
std::span<const std::string_view> fsdp_version_names() { return kFsdpVersionNames; }

}  // namespace memest
