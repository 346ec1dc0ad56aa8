#include "base/numbers.hpp"
#include "input/from_formats.hpp"
#include "input/model_loading.hpp"
#include "input/stacks.hpp"
#include "model/adapters.hpp"
#include "parallel/layout.hpp"

#include <memest/config.hpp>
#include <memest/error.hpp>
#include <memest/gpu_support.hpp>
#include <memest/hf_config.hpp>
#include <memest/units.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <locale>
#include <sstream>

namespace memest {
namespace {

// Calls parse(value) and prefixes any Error with the setting's origin.
template <typename T, typename Parse>
auto parse_setting(const Setting<T>& s, Parse parse) {
  try {
    return parse(s.value);
  } catch (const Error& e) {
    rethrow_with_context(e, s.where);
  }
}

bool flag(const std::optional<Setting<bool>>& s) { return s && s->value; }

std::uint64_t parse_positive(std::string_view text, std::string_view what) {
  std::uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v == 0) {
    throw Error(fmt::format("expected a positive whole number of {}, got \"{}\"", what, text));
  }
  return v;
}

// A size with a unit, or 0 (no reserve).
std::uint64_t parse_size_or_zero(std::string_view v) {
  return v == "0" ? std::uint64_t{0} : parse_bytes(v);
}

// A size, or the name of a stated context (cuda_context_presets).
std::uint64_t parse_context(std::string_view v) {
  if (const CudaContext* c = find_cuda_context(v)) return c->bytes;
  try {
    return parse_size_or_zero(v);
  } catch (const Error& e) {
    // The size's message with the contexts in its "(expected ...)": one line, one parenthetical.
    std::vector<std::string_view> names;
    for (const auto& c : cuda_context_presets()) names.push_back(c.name);
    std::string why = e.what();
    const bool closed = why.ends_with(')');
    if (closed) why.pop_back();
    throw Error(fmt::format("{}, or a stated context: {}{}", why, fmt::join(names, ", "),
                            closed ? ")" : ""));
  }
}

double parse_probability(std::string_view text) {
  double v = 0;
  if (!parse_double(text, v) || !std::isfinite(v) || v < 0 || v >= 1) {
    throw Error(fmt::format("expected a probability in [0, 1), got \"{}\"", text));
  }
  return v;
}

// Megatron-LM's --moe-expert-capacity-factor: a positive number (1.0, 1.25); past 64 the
// capacity bounds nothing a rank could receive.
double parse_capacity_factor(std::string_view text) {
  double v = 0;
  if (!parse_double(text, v) || !std::isfinite(v) || v <= 0 || v > 64) {
    throw Error(fmt::format("expected a capacity factor in (0, 64], got \"{}\"", text));
  }
  return v;
}

ModelSpec load_model(const RunOptions& o) {
  const int given =
      (o.params ? 1 : 0) + (o.model ? 1 : 0) + (o.config ? 1 : 0) + (o.architecture ? 1 : 0);
  if (given == 0) {
    throw Error("no model given: pass --params N (e.g. 7B), --model NAME or --config PATH");
  }
  if (given > 1) {
    std::vector<std::string> names;
    for (const auto* s : {&o.params, &o.model, &o.config, &o.architecture}) {
      if (*s) names.push_back(fmt::format("{} \"{}\"", (*s)->where, (*s)->value));
    }
    throw Error(fmt::format("conflicting model settings: {} (give exactly one)",
                            fmt::join(names, " and ")));
  }
  if (o.params) return model_from_count(parse_setting(*o.params, parse_count));
  if (o.model) {
    // A preset, a preset's Hub id, or a Hub id in the local Hugging Face cache.
    const std::string cache =
        hf_hub_cache([](const char* var) -> const char* { return std::getenv(var); });
    return parse_setting(*o.model,
                         [&](std::string_view name) { return load_named_model(name, cache); });
  }
  if (o.architecture) {
    // Errors name the setting, then the key inside the inline config.
    ModelSpec m = parse_hf_config(o.architecture->value, o.architecture->where);
    m.name = "inline architecture";
    return m;
  }
  // load_hf_config names the file itself; a flag adds nothing, a run config names its key.
  if (o.config->where.starts_with("--")) return load_hf_config(o.config->value);
  return parse_setting(*o.config, [](const std::string& path) { return load_hf_config(path); });
}

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = std::min(text.find(',', start), text.size());
    items.emplace_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

// A step with no trainable parameter has no gradients, no optimizer and no backward pass: it is
// inference, which `memest serve` estimates (docs/serving.md).
void check_something_trains(const ModelSpec& model, const RunOptions& o) {
  if (!o.freeze || trainable_count(model.inventory) > 0) return;
  throw Error(fmt::format(
      "{}: \"{}\" freezes every parameter of the model, so nothing trains (expected at least one "
      "trainable role, or --lora-rank R for adapters on a frozen base; for inference memory use "
      "memest serve)",
      o.freeze->where, o.freeze->value));
}

// --adapter-dtype: the adapters' own dtype; none for base (the parameters').
std::optional<Dtype> adapter_dtype(const RunOptions& o) {
  if (!o.adapter_dtype) return std::nullopt;
  return parse_setting(*o.adapter_dtype, [](std::string_view v) -> std::optional<Dtype> {
    const auto names = adapter_dtype_names();
    if (std::find(names.begin(), names.end(), v) == names.end()) {
      throw Error(fmt::format("unknown adapter dtype \"{}\" (expected one of: {})", v,
                              fmt::join(names, ", ")));
    }
    if (v == "base") return std::nullopt;
    return parse_dtype(v);
  });
}

// The model with its trainable subset applied: frozen roles, then LoRA/QLoRA.
ModelSpec resolve_model(const RunOptions& o) {
  ModelSpec model = load_model(o);
  if (o.freeze) {
    const auto roles = parse_setting(*o.freeze, [](std::string_view text) {
      std::vector<Role> r;
      for (const auto& item : split_list(text)) r.push_back(parse_role(item));
      return r;
    });
    freeze_roles(model.inventory, roles);
  }
  check_rules(o, Check::lora);
  if (!o.lora_rank) {
    check_something_trains(model, o);
    return model;
  }
  LoraSpec lora;
  lora.rank =
      parse_setting(*o.lora_rank, [](std::string_view v) { return parse_positive(v, "rank"); });
  lora.targets =
      o.lora_targets ? split_list(o.lora_targets->value) : std::vector<std::string>{"q", "v"};
  lora.qlora = flag(o.qlora);
  lora.double_quant = flag(o.double_quant);
  lora.adapter_dtype = adapter_dtype(o);
  check_rules(o, Check::qlora);
  const auto& where = o.lora_targets ? o.lora_targets->where : o.lora_rank->where;
  try {
    apply_lora(model, lora);
  } catch (const Error& e) {
    rethrow_with_context(e, where);
  }
  return model;
}

OptimizerSpec resolve_optimizer(const RunOptions& o) {
  OptimizerSpec spec;
  if (o.optimizer) spec.kind = parse_setting(*o.optimizer, parse_optimizer);
  check_rules(o, Check::optimizer);  // each optimizer's own options
  spec.nesterov = flag(o.nesterov);
  spec.amsgrad = flag(o.amsgrad);
  spec.momentum = flag(o.rmsprop_momentum);
  spec.centered = flag(o.centered);
  spec.first_moment = flag(o.first_moment);
  if (o.optimizer_impl) spec.impl = parse_setting(*o.optimizer_impl, parse_optimizer_impl);
  spec.paged = flag(o.paged_optimizer);
  check_rules(o, Check::optimizer_impl);
  if (flag(o.fused_optimizer)) spec.impl = OptimizerImpl::fused;
  return spec;
}

PrecisionPolicy resolve_precision(const RunOptions& o) {
  std::string name = "fp32";
  if (o.precision) name = o.precision->value;
  check_rules(o, Check::precision);
  if (flag(o.amp)) name = "amp";
  PrecisionPolicy policy =
      o.precision ? parse_setting(*o.precision, precision_preset) : precision_preset(name);
  PrecisionOverrides ov;
  auto dtype = [](const std::optional<Setting<std::string>>& s, std::optional<Dtype>& out) {
    if (s) out = parse_setting(*s, parse_dtype);
  };
  auto optional_dtype = [](const std::optional<Setting<std::string>>& s,
                           std::optional<std::optional<Dtype>>& out) {
    if (s) out = parse_setting(*s, parse_optional_dtype);
  };
  dtype(o.param_dtype, ov.param);
  dtype(o.grad_dtype, ov.grad);
  dtype(o.state_dtype, ov.state);
  dtype(o.activation_dtype, ov.activation);
  optional_dtype(o.master_dtype, ov.master);
  optional_dtype(o.working_dtype, ov.working);
  optional_dtype(o.grad_accum_dtype, ov.grad_accum);
  return apply_overrides(std::move(policy), ov);
}

// FSDP's version, hybrid shard group and MixedPrecision (docs/parallelism.md, "FSDP").
void resolve_fsdp(const RunOptions& o, ParallelSpec& p) {
  p.fsdp_version = 1;
  if (o.fsdp_version) {
    p.fsdp_version = parse_setting(*o.fsdp_version, [](std::string_view v) -> unsigned {
      if (v == "1" || v == "2") return static_cast<unsigned>(v[0] - '0');
      throw Error(fmt::format(
          "unknown FSDP version \"{}\" (expected 1, FullyShardedDataParallel, or 2, fully_shard)",
          v));
    });
  }
  check_rules(o, Check::fsdp_mode);
  if (o.fsdp->value == "hybrid") {
    p.shard_group =
        parse_setting(*o.fsdp_group, [](std::string_view v) { return parse_positive(v, "ranks"); });
    if (p.data_parallel % p.shard_group != 0) {
      throw Error(fmt::format(
          "{} {}: does not divide the {} data-parallel ranks (expected a divisor of {})",
          o.fsdp_group->where, p.shard_group, p.data_parallel, p.data_parallel));
    }
  }
  check_rules(o, Check::fsdp1);
  p.fsdp_orig_params = flag(o.fsdp_orig_params);
  p.fsdp_no_sync = flag(o.fsdp_no_sync);
  if (o.fsdp_param_dtype) p.fsdp_param_dtype = parse_setting(*o.fsdp_param_dtype, parse_dtype);
  if (o.fsdp_reduce_dtype) p.fsdp_reduce_dtype = parse_setting(*o.fsdp_reduce_dtype, parse_dtype);
}

// --fsdp and --distributed-optimizer are names for ZeRO stages over the --dp ranks.
void resolve_sharding_names(const RunOptions& o, ParallelSpec& p) {
  const auto stage_from = [&](const Setting<std::string>& s, unsigned stage) {
    if (o.zero_stage && p.zero_stage != stage) {
      throw Error(fmt::format("{} \"{}\" conflicts with {} {} (it is ZeRO stage {})", s.where,
                              s.value, o.zero_stage->where, o.zero_stage->value, stage));
    }
    if (stage > 0 && p.data_parallel == 1) {
      throw Error(
          fmt::format("{} shards over data-parallel ranks: give --dp N with N > 1", s.where));
    }
    p.zero_stage = stage;
  };
  if (o.fsdp) {
    const unsigned stage = parse_setting(*o.fsdp, [](std::string_view v) -> unsigned {
      if (v == "full" || v == "hybrid") return 3;
      if (v == "grad-op") return 2;
      if (v == "no-shard") return 0;
      throw Error(fmt::format("unknown FSDP mode \"{}\" (expected one of: {})", v,
                              fmt::join(fsdp_mode_names(), ", ")));
    });
    stage_from(*o.fsdp, stage);
    resolve_fsdp(o, p);
  } else {
    check_rules(o, Check::fsdp);  // FSDP's settings without --fsdp
  }
  if (flag(o.distributed_optimizer)) {
    const Setting<std::string> s{"on", o.distributed_optimizer->where};
    stage_from(s, 1);
  }
}

// Tensor, sequence, pipeline, context and expert parallelism (src/parallel/layout.hpp).
void resolve_model_split(const RunOptions& o, ParallelSpec& p) {
  const auto ranks = [](const TextSetting& s, std::uint64_t& out) {
    if (s) out = parse_setting(*s, [](std::string_view v) { return parse_positive(v, "ranks"); });
  };
  ranks(o.tensor_parallel, p.tensor);
  ranks(o.pipeline_parallel, p.pipeline);
  ranks(o.virtual_stages, p.virtual_stages);
  ranks(o.context_parallel, p.context);
  ranks(o.expert_parallel, p.expert);
  if (o.microbatches) {
    p.microbatches = parse_setting(
        *o.microbatches, [](std::string_view v) { return parse_positive(v, "micro-batches"); });
  }
  const auto layers = [](const TextSetting& s, std::uint64_t& out) {
    if (s) out = parse_setting(*s, [](std::string_view v) { return parse_positive(v, "layers"); });
  };
  if (o.pp_microbatch_group) {
    p.microbatch_group = parse_setting(*o.pp_microbatch_group, [](std::string_view v) {
      return parse_positive(v, "micro-batches");
    });
  }
  layers(o.first_stage_layers, p.first_stage_layers);
  layers(o.last_stage_layers, p.last_stage_layers);
  if (o.pp_schedule) {
    p.pp_schedule = parse_setting(*o.pp_schedule, parse_pipe_schedule);
  }
  if (o.moe_dispatcher) p.moe_dispatcher = parse_setting(*o.moe_dispatcher, parse_moe_dispatcher);
  if (o.moe_routing) p.moe_routing = parse_setting(*o.moe_routing, parse_moe_routing);
  if (o.moe_capacity_factor)
    p.moe_capacity_factor = parse_setting(*o.moe_capacity_factor, parse_capacity_factor);
  if (o.vocab_multiple) {
    p.vocab_multiple = parse_setting(
        *o.vocab_multiple, [](std::string_view v) { return parse_positive(v, "a multiple"); });
  }
  p.sequence = flag(o.sequence_parallel);
  p.bucket_view = flag(o.ddp_bucket_view);
}

// --offload: none, or a comma-separated list of optimizer, params, activations.
struct Offload {
  bool optimizer = false, params = false, activations = false;
};
Offload parse_offload(std::string_view text) {
  Offload out;
  if (text == "none") return out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view v = text.substr(start, comma - start);
    if (v == "optimizer") {
      out.optimizer = true;
    } else if (v == "params") {
      out.params = true;
    } else if (v == "activations") {
      out.activations = true;
    } else {
      throw Error(
          fmt::format("unknown offload \"{}\" (expected none, or a comma-separated list of: {})", v,
                      fmt::join(offload_names(), ", ")));
    }
    start = comma + 1;
  }
  return out;
}

ParallelSpec resolve_parallel(const RunOptions& o) {
  ParallelSpec p;
  if (o.data_parallel) {
    p.data_parallel = parse_setting(*o.data_parallel,
                                    [](std::string_view v) { return parse_positive(v, "ranks"); });
  }
  if (o.offload) {
    const Offload what = parse_setting(*o.offload, parse_offload);
    p.offload_params = what.params;
    p.offload_optimizer = what.params || what.optimizer;
  }
  if (o.zero_stage) {
    p.zero_stage = parse_setting(*o.zero_stage, [](std::string_view v) -> unsigned {
      if (v.size() != 1 || v[0] < '0' || v[0] > '3') {
        throw Error(fmt::format("unknown ZeRO stage \"{}\" (expected one of: {})", v,
                                fmt::join(zero_stage_names(), ", ")));
      }
      return static_cast<unsigned>(v[0] - '0');
    });
    if (p.zero_stage > 0 && p.data_parallel == 1) {
      throw Error(fmt::format("{} shards over data-parallel ranks: give --dp N with N > 1",
                              o.zero_stage->where));
    }
  }
  resolve_sharding_names(o, p);
  check_rules(o, Check::moe);
  resolve_model_split(o, p);
  if (p.offload_params && (p.zero_stage != 3 || p.data_parallel == 1)) {
    throw Error(
        fmt::format("{} params: parameters are offloaded from ZeRO-3 / FSDP full "
                    "sharding (expected --dp N with --zero 3 or --fsdp full)",
                    o.offload->where));
  }
  return p;
}

std::optional<Budget> resolve_budget(const RunOptions& o) {
  check_rules(o, Check::budget);
  std::optional<std::uint64_t> reserve;
  if (o.reserve) reserve = parse_setting(*o.reserve, parse_size_or_zero);
  if (o.gpu) {
    const Gpu& g =
        parse_setting(*o.gpu, [](std::string_view v) -> const Gpu& { return find_gpu(v); });
    // The default reserve is for the context; with --context-reserve the need carries it.
    return Budget{g.capacity, reserve.value_or(o.context_reserve ? 0 : kDefaultReserve),
                  std::string(g.name), true};
  }
  if (o.budget) {
    const auto bytes = parse_setting(*o.budget, parse_bytes);
    return Budget{bytes, reserve.value_or(0), fmt::format("budget {}", o.budget->value)};
  }
  check_rules(o, Check::reserve);
  return std::nullopt;
}

// Collects the Error of each independent check, so that one run reports every problem.
class Problems {
 public:
  template <typename F>
  void attempt(F f) {
    try {
      f();
    } catch (const Error& e) {
      messages_.emplace_back(e.what());
    }
  }
  void throw_if_any() const {
    if (!messages_.empty()) throw Error(fmt::format("{}", fmt::join(messages_, "\n")));
  }

 private:
  std::vector<std::string> messages_;
};

// The sizes of a step: sequences per micro-batch, tokens per sequence, micro-batches per step.
void resolve_sizes(const RunOptions& o, Problems& problems, TrainingSpec& t) {
  auto positive = [&](const TextSetting& s, std::string_view what, std::uint64_t& out) {
    if (!s) return;
    problems.attempt([&] {
      out = parse_setting(*s, [&](std::string_view v) { return parse_positive(v, what); });
    });
  };
  positive(o.batch, "sequences", t.micro_batch);
  positive(o.seq, "tokens", t.seq_len);
  positive(o.grad_accum, "micro-batches", t.grad_accum);
}

// What the layers run and keep: attention, recompute, dropout, zero_grad, device, allocator and
// the loss over the vocabulary.
void resolve_kernels(const RunOptions& o, Problems& problems, TrainingSpec& t) {
  problems.attempt([&] {
    if (o.attention) t.attention = parse_setting(*o.attention, parse_attention);
  });
  problems.attempt([&] {
    if (o.recompute) t.recompute = parse_setting(*o.recompute, parse_recompute);
  });
  problems.attempt([&] {
    if (o.dropout) t.dropout = parse_setting(*o.dropout, parse_probability);
  });
  problems.attempt([&] {
    if (!o.zero_grad) return;
    t.grads_set_to_none = parse_setting(*o.zero_grad, [](std::string_view v) {
      if (v != "none" && v != "zero") {
        throw Error(fmt::format("unknown zero_grad mode \"{}\" (expected one of: {})", v,
                                fmt::join(zero_grad_names(), ", ")));
      }
      return v == "none";
    });
  });
  problems.attempt([&] {
    if (o.device) t.device = parse_setting(*o.device, parse_device);
  });
  problems.attempt([&] {
    if (o.allocator) t.allocator = parse_setting(*o.allocator, parse_allocator);
  });
  problems.attempt([&] {
    if (o.loss) t.loss = parse_setting(*o.loss, parse_loss);
    if (!o.loss_chunk) return;
    check_rules(o, Check::loss);
    t.loss_chunk = parse_setting(
        *o.loss_chunk, [](std::string_view v) { return parse_positive(v, "chunks or positions"); });
  });
}

// The framework around the model: whose modelling code, how the model is loaded, the techniques
// of docs/techniques.md that are on or off.
void resolve_framework(const RunOptions& o, Problems& problems, TrainingSpec& t) {
  problems.attempt([&] {
    if (o.lora_dropout) t.lora_dropout = parse_setting(*o.lora_dropout, parse_probability);
    t.nf4_keeps_input = flag(o.qlora_keeps_input);
    t.model_loading = model_loading_of(o);
    if (o.model_code) t.model_code = parse_setting(*o.model_code, parse_model_code);
  });
  if (o.stack) t.stack = o.stack->value;
  t.optimizer_in_backward = flag(o.optimizer_in_backward);
  t.compile = flag(o.compile);
  t.loop_keeps_output = flag(o.loop_keeps_output);
  t.output_fp32 = flag(o.output_fp32);
  t.softmax_keeps_input = flag(o.softmax_keeps_input);
  t.sdpa_enable_gqa = flag(o.sdpa_enable_gqa);
  if (o.offload) {  // its errors are reported once, by resolve_parallel
    try {
      t.offload_activations = parse_offload(o.offload->value).activations;
    } catch (const Error&) {
    }
  }
}

// The CUDA context and the cuBLAS workspaces: PyTorch's is larger on sm90, none on the CPU;
// Transformer Engine's own, with its layers, larger from sm90 on.
void resolve_device_memory(const RunOptions& o, Problems& problems, TrainingSpec& t) {
  problems.attempt([&] {
    if (o.context_reserve) t.context_reserve = parse_setting(*o.context_reserve, parse_context);
  });
  problems.attempt([&] {
    const bool te =
        o.transformer_impl && parse_setting(*o.transformer_impl, parse_transformer_impl) ==
                                  TransformerImpl::transformer_engine;
    if (t.device == Device::cpu) {
      t.cublas_workspace = 0;
      return;
    }
    t.te_workspace = te ? kTeWorkspace : 0;
    if (!o.gpu) return;
    const Gpu* g = nullptr;
    try {
      g = &find_gpu(o.gpu->value);
    } catch (const Error&) {
      return;  // an unknown GPU is named once, by resolve_budget
    }
    t.cublas_workspace = cublas_workspace_for(g->sm);
    t.no_flash_kernel = !gpu_support(*g).flash_attention;
    if (te && g->sm >= 90) t.te_workspace = kTeWorkspaceSm90;
  });
}

TrainingSpec resolve_training(const RunOptions& o, Problems& problems) {
  TrainingSpec t;
  resolve_sizes(o, problems, t);
  resolve_kernels(o, problems, t);
  resolve_framework(o, problems, t);
  resolve_device_memory(o, problems, t);
  problems.attempt([&] { check_rules(o, Check::sizes); });  // a micro-batch and a sequence
  return t;
}

// PyTorch gives gradients to floating-point tensors only: integer and 4-bit parameters can be
// stored (a frozen, quantized base) but not trained.
void check_trainable_dtype(const RunSpec& run, const RunOptions& o) {
  const Dtype d = run.precision.param;
  if (d != Dtype::int8 && d != Dtype::int4 && d != Dtype::nf4) return;
  if (trainable_count(run.model.inventory) == 0) return;
  const std::string where = o.param_dtype ? o.param_dtype->where : "--param-dtype";
  throw Error(fmt::format(
      "{}: {} parameters cannot be trained (autograd gives gradients to floating-point tensors "
      "only): store a frozen base in 4 bits with --lora-rank R --qlora, or use fp32, bf16 or fp16",
      where, dtype_name(d)));
}

// The techniques of docs/techniques.md, where they cannot be combined as given.
void check_techniques(const RunSpec& run, const RunOptions& o) {
  if (run.parallel.fsdp_no_sync && run.training.grad_accum == 1) {
    throw Error(fmt::format(
        "{}: no_sync() spans the micro-batches of an accumulation (expected --grad-accum N with "
        "N > 1)",
        o.fsdp_no_sync->where));
  }
  if (run.training.optimizer_in_backward) {
    const std::string& where = o.optimizer_in_backward->where;
    if (run.training.grad_accum > 1) {
      throw Error(
          fmt::format("{}: the step runs in every backward pass, so gradients cannot be "
                      "accumulated (expected --grad-accum 1, got {})",
                      where, run.training.grad_accum));
    }
    if (run.precision.master) {
      throw Error(
          fmt::format("{}: each gradient is applied to its parameter as it is "
                      "accumulated; a policy with master weights is not supported "
                      "(expected a precision without master weights: fp32, amp, bf16)",
                      where));
    }
    if (run.parallel.offload_optimizer) {
      throw Error(
          fmt::format("{}: conflicts with --offload optimizer (the step runs on the host)", where));
    }
  }
  const OptimizerKind k = run.optimizer.kind;
  if (run.optimizer.paged && k != OptimizerKind::adam && k != OptimizerKind::adamw &&
      k != OptimizerKind::adam8bit && k != OptimizerKind::lion) {
    throw Error(
        fmt::format("{}: bitsandbytes pages adam, adamw, adam8bit and lion, got optimizer "
                    "\"{}\"",
                    o.paged_optimizer->where, optimizer_name(k)));
  }
  if (run.optimizer.paged && run.parallel.offload_optimizer) {
    throw Error(
        fmt::format("{}: conflicts with --offload optimizer (the states are either paged "
                    "or in host memory)",
                    o.paged_optimizer->where));
  }
}

// check_layout names the flags; a value from a run config is named by its file and key instead.
void check_layout_where(const RunSpec& run, const RunOptions& o) {
  try {
    check_layout(run);
  } catch (const Error& e) {
    const std::pair<std::string_view, const TextSetting*> texts[] = {
        {"--tp", &o.tensor_parallel},
        {"--pp", &o.pipeline_parallel},
        {"--vpp", &o.virtual_stages},
        {"--microbatches", &o.microbatches},
        {"--cp", &o.context_parallel},
        {"--ep", &o.expert_parallel},
        {"--pp-schedule", &o.pp_schedule},
        {"--pp-microbatch-group", &o.pp_microbatch_group},
        {"--first-stage-layers", &o.first_stage_layers},
        {"--last-stage-layers", &o.last_stage_layers},
        {"--moe-dispatcher", &o.moe_dispatcher}};
    std::istringstream in(e.what());
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) {
      for (const auto& [flag, setting] : texts) {
        // A file's key, or a stack's default ("--stack megatron (--moe-dispatcher)").
        const bool from_file = *setting && (!(*setting)->where.starts_with("--") ||
                                            (*setting)->where.starts_with("--stack"));
        if (from_file && line.starts_with(std::string(flag) + " "))
          line = (*setting)->where + line.substr(flag.size());
      }
      if (o.sequence_parallel && !o.sequence_parallel->where.starts_with("--") &&
          line.starts_with("--sp"))
        line = o.sequence_parallel->where + line.substr(4);
      // check_layout names the older flag; --model-loading fsdp-sync is named as given.
      constexpr std::string_view kSync = "--fsdp-sync-module-states:";
      if (o.model_loading && line.starts_with(kSync))
        line = fmt::format("{} {}:{}", o.model_loading->where, o.model_loading->value,
                           line.substr(kSync.size()));
      lines.push_back(std::move(line));
    }
    throw Error(fmt::format("{}", fmt::join(lines, "\n")));
  }
}

}  // namespace

RunSpec resolve(const RunOptions& given) {
  const RunOptions options = with_stack(given);
  RunSpec run;
  Problems problems;
  problems.attempt([&] { run.model = resolve_model(options); });
  problems.attempt([&] { run.optimizer = resolve_optimizer(options); });
  problems.attempt([&] { run.precision = resolve_precision(options); });
  run.training = resolve_training(options, problems);
  problems.attempt([&] { run.parallel = resolve_parallel(options); });
  problems.attempt([&] { run.budget = resolve_budget(options); });
  problems.throw_if_any();
  // FSDP's MixedPrecision casts the module's inputs and parameters to param_dtype: it computes
  // in it.
  if (run.parallel.fsdp_param_dtype && !options.activation_dtype)
    run.precision.activation = *run.parallel.fsdp_param_dtype;
  check_trainable_dtype(run, options);
  check_rules(options, Check::loading);
  check_techniques(run, options);
  // Adapters of their own dtype are all that trains: their gradients and states take it
  // (torch.optim's states are zeros_like(param)).
  if (const auto d = adapter_dtype(options); d && options.lora_rank) {
    if (!options.grad_dtype) run.precision.grad = *d;
    if (!options.state_dtype) run.precision.state = *d;
    run.training.adapter_dtype = d;
  }
  // bitsandbytes' 32-bit optimizers keep fp32 states whatever the parameters' dtype.
  if (run.optimizer.paged && run.optimizer.kind != OptimizerKind::adam8bit && !options.state_dtype)
    run.precision.state = Dtype::fp32;
  check_layout_where(run, options);
  run.training.stack_assumptions = stack_assumptions(given);
  run.from = from_in_effect(given);
  return run;
}

}  // namespace memest
