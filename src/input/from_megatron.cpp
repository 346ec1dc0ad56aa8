// memest --from: a Megatron-LM command line (pretrain_gpt.py's arguments, as
// megatron/training/arguments.py @d98e8a64 names them), kept in a file or as the MODEL_ARGS of a
// functional test's model_config.yaml. The model is built from the arguments as a megatron_gpt
// config (src/input/hf_families.cpp).
#include "input/from_formats.hpp"
#include "input/from_map.hpp"

#include <memest/error.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <charconv>

namespace memest {
namespace {

// The architecture's arguments and their megatron_gpt config keys.
constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kMegatronModelArgs = {{
    {"num-layers", "num_layers"},
    {"hidden-size", "hidden_size"},
    {"num-attention-heads", "num_attention_heads"},
    {"kv-channels", "kv_channels"},
    {"ffn-hidden-size", "ffn_hidden_size"},
    {"max-position-embeddings", "max_position_embeddings"},
    {"vocab-size", "vocab_size"},
    {"position-embedding-type", "position_embedding_type"},
    {"normalization", "normalization"},
    {"attention-dropout", "attention_dropout"},
    {"hidden-dropout", "hidden_dropout"},
    {"num-query-groups", "num_query_groups"},
}};

// GPT-2's BPE vocabulary (the vocab.json of --vocab-file with GPT2BPETokenizer): 50257 tokens.
constexpr std::string_view kGpt2Vocab = "50257";

nlohmann::ordered_json megatron_number(const FromValue& v) {
  auto j = nlohmann::ordered_json::parse(v.text, nullptr, false);
  if (!j.is_number())
    throw Error(fmt::format("{}: expected a number, got \"{}\"", v.where, v.text));
  return j;
}

bool megatron_flag(FromMapper& m, std::string_view name) {
  const FromValue* v = m.get(name);
  return v && from_bool(v->text, v->where);
}

// The model as a megatron_gpt config.json, given inline (--architecture).
void megatron_model(FromMapper& m) {
  if (flags_name_model(m.flags()) || !m.get("num-layers")) return;
  nlohmann::ordered_json arch = {{"model_type", "megatron_gpt"}};
  const bool gqa = megatron_flag(m, "group-query-attention");
  for (const auto& [arg, key] : kMegatronModelArgs) {
    const FromValue* v = m.get(arg);
    if (!v || (arg == "num-query-groups" && !gqa)) continue;
    const bool text = arg == "position-embedding-type" || arg == "normalization";
    arch[key] = text ? nlohmann::ordered_json(v->text) : megatron_number(*v);
  }
  if (megatron_flag(m, "swiglu")) arch["swiglu"] = true;
  if (megatron_flag(m, "disable-bias-linear")) arch["add_bias_linear"] = false;
  if (megatron_flag(m, "add-qkv-bias")) arch["add_qkv_bias"] = true;
  if (megatron_flag(m, "untie-embeddings-and-output-weights"))
    arch["untie_embeddings_and_output_weights"] = true;
  const FromValue* tokenizer = m.get("tokenizer-type");
  const FromValue* vocab_file = m.get("vocab-file");
  if (!arch.contains("vocab_size") &&
      ((tokenizer && tokenizer->text == "GPT2BPETokenizer") || (!tokenizer && vocab_file)))
    arch["vocab_size"] = nlohmann::ordered_json::parse(kGpt2Vocab);
  FromValue model = *m.get("num-layers");
  model.where =
      fmt::format("{}: the model's arguments (--num-layers, --hidden-size, ...)", m.source());
  m.set("--architecture", arch.dump(), model);
}

std::uint64_t megatron_count(const std::string& text, const std::string& where) {
  std::uint64_t n = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr != text.data() + text.size() || n == 0)
    throw Error(fmt::format("{}: expected a positive whole number, got \"{}\"", where, text));
  return n;
}

// --global-batch-size over --micro-batch-size and the data-parallel ranks (the run's --dp: the
// world size is the launcher's, not an argument).
void megatron_accumulation(FromMapper& m, const FromValue* micro) {
  const FromValue* global = m.get("global-batch-size");
  if (!global || !micro) return;
  const std::uint64_t dp =
      m.flags().data_parallel ? megatron_count(m.flags().data_parallel->value, "--dp") : 1;
  const std::uint64_t mb = megatron_count(micro->text, micro->where);
  const std::uint64_t gb = megatron_count(global->text, global->where);
  if (gb % (mb * dp) != 0)
    throw Error(
        fmt::format("{}: {} is not a multiple of --micro-batch-size {} x {} data-parallel "
                    "ranks (--dp)",
                    global->where, gb, mb, dp));
  FromValue steps = *global;
  steps.where += fmt::format(" / (--micro-batch-size {} x --dp {})", mb, dp);
  m.set("--grad-accum", std::to_string(gb / (mb * dp)), steps);
}

void megatron_layout(FromMapper& m) {
  static constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kCounts = {{
      {"tensor-model-parallel-size", "--tp"},
      {"pipeline-model-parallel-size", "--pp"},
      {"context-parallel-size", "--cp"},
      {"expert-model-parallel-size", "--ep"},
      {"decoder-first-pipeline-num-layers", "--first-stage-layers"},
      {"decoder-last-pipeline-num-layers", "--last-stage-layers"},
  }};
  for (const auto& [arg, flag] : kCounts)
    if (const FromValue* v = m.get(arg)) m.set(flag, v->text, *v);
  if (const FromValue* sp = m.get("sequence-parallel"))
    m.set("--sp", from_bool(sp->text, sp->where), *sp);
  if (const FromValue* d = m.get("use-distributed-optimizer"))
    m.set("--distributed-optimizer", from_bool(d->text, d->where), *d);
  if (const FromValue* v = m.get("make-vocab-size-divisible-by"))
    m.set("--vocab-multiple", v->text, *v);
}

void megatron_precision(FromMapper& m) {
  if (const FromValue* b = m.get("bf16"); b && from_bool(b->text, b->where))
    m.set("--precision", std::string("mixed-bf16"), *b);
  if (const FromValue* h = m.get("fp16"); h && from_bool(h->text, h->where))
    m.set("--precision", std::string("mixed"), *h);
  if (const FromValue* o = m.get("optimizer")) {
    if (o->text != "adam" && o->text != "sgd")
      throw Error(
          fmt::format("{}: unknown optimizer \"{}\" (expected adam or sgd)", o->where, o->text));
    // Megatron's adam decouples weight decay (AdamW); its SGD keeps momentum (--sgd-momentum 0.9).
    m.set("--optimizer", std::string(o->text == "adam" ? "adamw" : "sgd-momentum"), *o);
  }
}

void megatron_recompute(FromMapper& m) {
  const FromValue* granularity = m.get("recompute-granularity");
  const FromValue* method = m.get("recompute-method");
  const FromValue* layers = m.get("recompute-num-layers");
  if (granularity) {
    if (granularity->text != "full" && granularity->text != "selective")
      throw Error(fmt::format("{}: unknown granularity \"{}\" (expected full or selective)",
                              granularity->where, granularity->text));
    m.set("--recompute", granularity->text, *granularity);
  } else if (const FromValue* a = m.get("recompute-activations");
             a && from_bool(a->text, a->where)) {
    m.set("--recompute", std::string("selective"), *a);
  }
  // memest's full recompute checkpoints every layer: method uniform with one layer per chunk.
  if (method && method->text == "block") m.not_modelled(*method, "some layers not recomputed");
  if (layers && layers->text != "1")
    m.not_modelled(*layers, "layers recomputed in chunks of more than one");
}

// --transformer-impl and --attention-backend: which attention kernel keeps what.
void megatron_attention(FromMapper& m) {
  const FromValue* impl = m.get("transformer-impl");
  if (impl) m.set("--transformer-impl", impl->text, *impl);
  if (const FromValue* backend = m.get("attention-backend")) {
    const std::string& b = backend->text;
    if (b != "flash" && b != "fused" && b != "unfused" && b != "local" && b != "auto")
      throw Error(
          fmt::format("{}: unknown attention backend \"{}\" (expected flash, fused, "
                      "unfused, local or auto)",
                      backend->where, b));
    m.set("--attention", std::string(b == "unfused" || b == "local" ? "eager" : "flash"), *backend);
  } else if (impl && impl->text == "local") {  // the local spec's DotProductAttention
    m.set("--attention", std::string("eager"), *impl);
  }
}

constexpr std::array<KeyPattern, 52> kMegatronIgnored = {{
    {"log-params-norm", ""},
    {"log-num-zeros-in-grad", ""},
    {"log-validation-ppl-to-tensorboard", ""},
    {"log-timers-to-tensorboard", ""},
    {"log-memory-to-tensorboard", ""},
    {"tensorboard-dir", ""},
    {"train-iters", ""},
    {"train-samples", ""},
    {"timing-log-level", ""},
    {"lr-decay-iters", ""},
    {"save", ""},
    {"load", ""},
    {"data-path", ""},
    {"vocab-file", ""},
    {"merge-file", ""},
    {"split", ""},
    {"distributed-backend", ""},
    {"lr", ""},
    {"lr-decay-style", ""},
    {"min-lr", ""},
    {"weight-decay", ""},
    {"clip-grad", ""},
    {"lr-warmup-fraction", ""},
    {"lr-warmup-iters", ""},
    {"log-interval", ""},
    {"save-interval", ""},
    {"eval-interval", ""},
    {"eval-iters", ""},
    {"no-mmap-bin-files", ""},
    {"deterministic-mode", ""},
    {"use-mcore-models", ""},
    {"ckpt-format", ""},
    {"dist-ckpt-strictness", ""},
    {"data-cache-path", ""},
    {"async-save", ""},
    {"use-persistent-ckpt-worker", ""},
    {"mock-data", ""},
    {"seed", ""},
    {"init-method-std", ""},
    {"adam-beta1", ""},
    {"adam-beta2", ""},
    {"adam-eps", ""},
    {"wandb-project", ""},
    {"wandb-exp-name", ""},
    {"exit-interval", ""},
    {"tokenizer-model", ""},
    {"log-throughput", ""},
    {"use-checkpoint-args", ""},
    {"no-load-optim", ""},
    {"no-load-rng", ""},
    {"dist-ckpt-optim-fully-reshardable", ""},
    {"tokenizer-type", ""},
}};

constexpr std::array<KeyPattern, 9> kMegatronKnown = {{
    {"overlap-grad-reduce", "gradient buckets reduced during backward"},
    {"overlap-param-gather", "the distributed optimizer's parameter all-gather overlapped"},
    {"no-gradient-accumulation-fusion",
     "each weight gradient computed apart and then added to main_grad"},
    {"attention-softmax-in-fp32", "the attention softmax computed in fp32"},
    {"apply-query-key-layer-scaling", "query-key scaling in the attention softmax"},
    {"num-experts", "mixture-of-experts layers (give the model with --config)"},
    {"rampup-batch-size", "a batch size that grows over training"},
    {"fp8-format", "fp8 linears (Transformer Engine)"},
    {"num-layers-per-virtual-pipeline-stage", "an interleaved schedule (give --vpp)"},
}};

}  // namespace

RunOptions map_megatron(const FromTree& tree, const RunOptions& flags) {
  FromMapper m(tree, FromFormat::megatron, flags);
  megatron_model(m);
  const FromValue* micro = m.get("micro-batch-size");
  if (micro) m.set("--batch", micro->text, *micro);
  if (const FromValue* s = m.get("seq-length")) m.set("--seq", s->text, *s);
  megatron_accumulation(m, micro);
  megatron_layout(m);
  megatron_precision(m);
  megatron_recompute(m);
  megatron_attention(m);
  return m.finish(kMegatronIgnored, kMegatronKnown);
}

}  // namespace memest
