// memest --from: frameworks' config files read into the run options (docs/from.md). The GPU runs
// of tests/data/gpu given as their config files (tests/data/gpu/from.jsonl) give the bytes of the
// facts command lines (runs_facts.jsonl); the readers' mappings, overrides and messages are
// checked on small files written here.
#include "gpu_cases.hpp"
#include "testutil.hpp"

#include <memest/error.hpp>
#include <memest/from.hpp>

#include <catch2/catch.hpp>

#include <map>

using memest::parse_from_text;
using memest::RunOptions;

namespace {

RunOptions from_text(const std::string& text, const std::string& source,
                     std::vector<std::string> overrides = {}, const RunOptions& flags = {}) {
  return parse_from_text(text, source, overrides, flags);
}

// "value (where)" of a valued option, for one CHECK.
std::string said(const memest::TextSetting& s) {
  return s ? s->value + " (" + s->where + ")" : "unset";
}

const char* const kRecipe = R"(
model:
  _component_: torchtune.models.llama2.lora_llama2_7b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  lora_alpha: 16
tokenizer:
  _component_: torchtune.models.llama2.llama2_tokenizer
  path: /tmp/tokenizer.model
  max_seq_len: 1024
optimizer:
  _component_: torch.optim.AdamW
  lr: 3e-4
loss:
  _component_: torch.nn.CrossEntropyLoss
batch_size: 4
gradient_accumulation_steps: 8
dtype: bf16
enable_activation_checkpointing: True
output_dir: /tmp/out
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: ${output_dir}
fsdp_cpu_offload: True
my_memory_trick: 7
)";

}  // namespace

TEST_CASE("the GPU runs given as their config files give the facts command lines' bytes",
          "[from][gpu]") {
  const std::string root = MEMEST_SOURCE_DIR;
  std::map<std::string, memest::gpu::Run> facts;
  for (auto& run : memest::gpu::load_runs(root, "runs_facts.jsonl")) facts[run.id] = run;
  const auto rows = memest::truth::load_cases(root + "/tests/data/gpu/from.jsonl");
  REQUIRE(rows.size() == 20);  // 6 + 5 torchtune, 3 torchtitan, 5 Megatron-LM (one twice)
  for (const auto& row : rows) {
    const std::string id = row["id"];
    INFO(id);
    const auto& run = facts.at(id);
    std::vector<std::string> args = {"memest", "--from"};
    const auto from = row["from"].get<std::vector<std::string>>();
    args.push_back(root + "/" + from.front());
    args.insert(args.end(), from.begin() + 1, from.end());
    for (const auto& f : row["flags"]) args.push_back(f);
    args.insert(args.end(), {"--format", "json"});
    const auto by_file = memest::truth::cli_json(args, id);
    const auto by_flags = memest::gpu::estimate(run);
    CHECK(memest::gpu::estimated(run, by_file) == memest::gpu::estimated(run, by_flags));
    for (const char* key : {"peak", "categories", "stages", "total"})
      CHECK(by_file[key] == by_flags[key]);
    CHECK(by_file["from"]["file"] == root + "/" + from.front());
    CHECK(!by_flags.contains("from"));
  }
}

TEST_CASE("a torchtune recipe: builder, LoRA, sizes, precision and where each came from",
          "[from]") {
  const RunOptions o = from_text(kRecipe, "r.yaml");
  CHECK(said(o.model) == "llama-2-7b (r.yaml: model._component_)");
  // lora_ builders default lora_rank to 8 (torchtune/models/llama2/_model_builders.py).
  CHECK(said(o.lora_rank) == "8 (r.yaml: model._component_ (the LoRA builders' lora_rank=8))");
  CHECK(said(o.lora_targets) == "q,v,o,gate,up,down (r.yaml: model.lora_attn_modules)");
  CHECK(said(o.seq) == "1024 (r.yaml: tokenizer.max_seq_len)");
  CHECK(said(o.batch) == "4 (r.yaml: batch_size)");
  CHECK(said(o.grad_accum) == "8 (r.yaml: gradient_accumulation_steps)");
  CHECK(said(o.precision) == "bf16 (r.yaml: dtype)");
  CHECK(said(o.recompute) == "full (r.yaml: enable_activation_checkpointing)");
  CHECK(said(o.optimizer) == "adamw (r.yaml: optimizer._component_)");
  CHECK(said(o.loss) == "hf (r.yaml: loss._component_)");
  CHECK(said(o.offload) == "optimizer,params (r.yaml: fsdp_cpu_offload)");
  CHECK(said(o.stack) == "torchtune (--from r.yaml)");
  REQUIRE(o.from);
  CHECK(o.from->format == "torchtune");
  // lr, paths and logging cannot change memory; an unknown key may.
  REQUIRE(o.from->not_modelled.size() == 1);
  CHECK(o.from->not_modelled[0] ==
        "r.yaml: my_memory_trick = 7: not a key memest knows for this framework; it may change "
        "memory");
}

TEST_CASE("tune run's overrides: dotted keys, a component by its parent, ~ removes, None",
          "[from]") {
  const RunOptions o =
      from_text(kRecipe, "r.yaml",
                {"batch_size=2", "loss=torchtune.modules.loss.CEWithChunkedOutputLoss",
                 "model=torchtune.models.llama3_2.qlora_llama3_2_3b", "model.lora_rank=64",
                 "~fsdp_cpu_offload", "tokenizer.max_seq_len=None", "~my_memory_trick"});
  CHECK(said(o.batch) == "2 (override batch_size=2)");
  CHECK(said(o.loss) == "chunked (override loss=torchtune.modules.loss.CEWithChunkedOutputLoss)");
  CHECK(o.model->value == "llama-3.2-3b");
  CHECK(o.qlora->value);
  CHECK(o.lora_rank->value == "64");
  CHECK_FALSE(o.offload);
  CHECK_FALSE(o.seq);  // max_seq_len null: the run gives --seq
  CHECK(o.from->not_modelled.empty());
  CHECK_THROWS_WITH(from_text(kRecipe, "r.yaml", {"~nothing"}),
                    "override ~nothing: r.yaml has no key nothing");
  CHECK_THROWS_WITH(from_text(kRecipe, "r.yaml", {"batch_size"}),
                    "override batch_size: expected KEY=VALUE (a dotted key of r.yaml)");
}

TEST_CASE("a flag beside --from overrides the file, and the file's key is then not listed",
          "[from]") {
  const auto j = memest::test::run_json(
      {"--from", memest::test::data_path("data/gpu/from/torchtitan-9dec370-llama3_8b.toml"),
       "training.batch_size=2", "--dp", "8", "--seq", "4096"});
  CHECK(j["inputs"]["training"]["seq_len"] == 4096);
  CHECK(j["inputs"]["training"]["micro_batch"] == 2);
  bool seq_listed = false, batch_listed = false;
  for (const auto& k : j["from"]["used"]) {
    seq_listed = seq_listed || k["option"] == "--seq";
    batch_listed = batch_listed ||
                   (k["option"] == "--batch" && k["where"] == "override training.batch_size=2");
  }
  CHECK_FALSE(seq_listed);
  CHECK(batch_listed);
  CHECK(j["inputs"]["parallel"]["fsdp"] == "full");  // data_parallel_shard_degree = -1
  CHECK(j["inputs"]["parallel"]["fsdp_version"] == 2);
  CHECK(j["inputs"]["training"]["recompute"] == "op");
}

TEST_CASE("a Megatron-LM command line: the model, the accumulation over --dp, the layout",
          "[from]") {
  const std::string args = R"(# a launch script
torchrun --nproc_per_node 8 pretrain_gpt.py \
  --num-layers 4 --hidden-size 256 --num-attention-heads 8 \
  --group-query-attention --num-query-groups 2 --swiglu --disable-bias-linear \
  --micro-batch-size 2 --global-batch-size=64 --seq-length 512 \
  --tensor-model-parallel-size 2 --sequence-parallel --bf16 \
  --data-path "/data/my corpus" --lr 1e-4 --overlap-grad-reduce
)";
  RunOptions flags;
  flags.data_parallel = memest::Setting<std::string>{"4", "--dp"};
  const RunOptions o = from_text(args, "run.sh", {}, flags);
  CHECK(o.architecture->value ==
        R"({"model_type":"megatron_gpt","num_layers":4,"hidden_size":256,)"
        R"("num_attention_heads":8,"num_query_groups":2,"swiglu":true,"add_bias_linear":false})");
  // 64 sequences a step over 4 data-parallel ranks of micro-batches of 2: 8 micro-batches.
  CHECK(o.grad_accum->value == "8");
  CHECK(said(o.precision) == "mixed-bf16 (run.sh: --bf16)");
  CHECK(o.tensor_parallel->value == "2");
  CHECK(o.sequence_parallel->value);
  REQUIRE(o.from->not_modelled.size() == 1);
  CHECK(o.from->not_modelled[0] ==
        "run.sh: --overlap-grad-reduce = true: gradient buckets reduced during backward");
  CHECK_THROWS_WITH(from_text(args, "run.sh", {"num-layers=x"}, flags),
                    "override num-layers=x: expected a number, got \"x\"");
  flags.data_parallel = memest::Setting<std::string>{"3", "--dp"};
  CHECK_THROWS_WITH(from_text(args, "run.sh", {}, flags),
                    "run.sh: --global-batch-size: 64 is not a multiple of --micro-batch-size 2 x "
                    "3 data-parallel ranks (--dp)");
  CHECK_THROWS_WITH(from_text("--num-layers 2 -- x", "a.args"),
                    "a.args: \"--\": expected an argument --name, or its value after it");
}

TEST_CASE("a LitGPT config: checkpoint_dir as a Hub id, precision, QLoRA, devices and batches",
          "[from]") {
  const std::string config = R"(
checkpoint_dir: checkpoints/meta-llama/Llama-2-7b-hf
out_dir: out/finetune/qlora-llama2-7b
precision: bf16-true
quantize: bnb.nf4
devices: 2
lora_r: 32
lora_query: true
lora_key: false
lora_value: true
lora_projection: false
lora_mlp: false
lora_head: false
train:
  global_batch_size: 16
  micro_batch_size: 2
  max_seq_length: 512
  epochs: 1
optimizer:
  class_path: torch.optim.AdamW
  init_args:
    lr: 0.0002
)";
  const RunOptions o = from_text(config, "lora.yaml");
  CHECK(o.model->value == "meta-llama/Llama-2-7b-hf");
  CHECK(o.precision->value == "bf16");
  CHECK(o.qlora->value);
  CHECK(o.lora_targets->value == "q,v");
  CHECK(o.data_parallel->value == "2");
  CHECK(o.fsdp->value == "full");
  // 16 a step, 8 on each of 2 devices, in micro-batches of 2: 4.
  CHECK(o.grad_accum->value == "4");
  CHECK(o.seq->value == "512");
  CHECK(o.stack->value == "litgpt");
  CHECK(o.from->not_modelled.empty());
}

TEST_CASE("bad --from files: one line naming the file, the key and the problem, exit 2", "[from]") {
  using memest::Error;
  CHECK_THROWS_WITH(from_text("model: [unclosed", "bad.yaml"),
                    Catch::Matchers::StartsWith("bad.yaml: invalid YAML: ") &&
                        Catch::Matchers::Contains("at line 1, column"));
  CHECK_THROWS_WITH(from_text("[training\nbatch_size = 2", "bad.toml"),
                    Catch::Matchers::StartsWith("bad.toml: invalid TOML: ") &&
                        Catch::Matchers::Contains("at line 1"));
  // fuzz_from_toml's finding: toml++ 3.3 reaches undefined behaviour on U+FCFF outside a string.
  CHECK_THROWS_WITH(from_text("a = 1\n\xEF\xB3\xBF", "u.toml"),
                    "u.toml: invalid TOML: a non-ASCII character outside a string or comment (or "
                    "one toml++ cannot read in a multi-line string) at line 2");
  CHECK_THROWS_WITH(from_text("mode =4's\xC8\x9F'", "q.toml"),  // a quote in a bare value
                    Catch::Matchers::StartsWith("q.toml: invalid TOML: a non-ASCII character"));
  CHECK(from_text("[training] # \xC3\xA9\nbatch_size = 2 # \xEF\xB3\xBF\n[job]\ndescription = "
                  "\"\xC3\xA9t\xC3\xA9\"\n",
                  "ok.toml")
            .batch->value == "2");
  CHECK_THROWS_WITH(from_text("just: text", "x.yaml"),
                    Catch::Matchers::StartsWith("x.yaml: not a config memest can read"));
  CHECK_THROWS_WITH(from_text(kRecipe, "r.yaml", {"enable_activation_checkpointing=maybe"}),
                    "override enable_activation_checkpointing=maybe: expected true or false, got "
                    "\"maybe\"");
  CHECK_THROWS_WITH(from_text(kRecipe, "r.yaml", {"model=torchtune.models.llama9_1b"}),
                    "override model=torchtune.models.llama9_1b: torchtune builder "
                    "\"torchtune.models.llama9_1b\" has no memest preset; give the model with "
                    "--model (a preset, Hub id or folder)");
  std::string deep = "a:";
  for (int i = 0; i < 200; ++i) deep += " {b:";
  deep += " 1" + std::string(200, '}');
  CHECK_THROWS_AS(from_text(deep, "deep.yaml"), Error);
  // resolve() names the key: a batch that is not a number.
  const auto r = memest::test::run_cli(
      {"--from",
       memest::test::data_path(
           "data/gpu/from/torchtune-ff594c231-llama2-7B_lora_single_device.yaml"),
       "batch_size=two", "--seq", "512"});
  CHECK(r.code == 2);
  CHECK(r.err.starts_with("memest: error: override batch_size=two: "));
  CHECK(memest::test::run_cli({"--from", "missing.yaml"}).err ==
        "memest: error: missing.yaml: cannot open file: No such file or directory\n");
}

TEST_CASE("a DeepSpeed config and a TrainingArguments JSON: ZeRO, offload, precision, optim",
          "[from]") {
  const RunOptions ds = from_text(R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": "auto",
    "bf16": {"enabled": true}, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                          "offload_param": {"device": "none"}, "overlap_comm": true},
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}})",
                                  "ds.json");
  CHECK(said(ds.batch) == "4 (ds.json: train_micro_batch_size_per_gpu)");
  CHECK_FALSE(ds.grad_accum);  // "auto": the Trainer's own
  CHECK(said(ds.zero_stage) == "3 (ds.json: zero_optimization.stage)");
  CHECK(said(ds.offload) == "optimizer (ds.json: zero_optimization.offload_optimizer.device)");
  CHECK(ds.precision->value == "mixed-bf16");
  CHECK(ds.optimizer->value == "adamw");
  CHECK_FALSE(ds.stack);  // the engine runs on its own or under the Trainer
  REQUIRE(ds.from->not_modelled.size() == 1);
  CHECK(ds.from->not_modelled[0] ==
        "ds.json: zero_optimization.overlap_comm = true: communication buckets overlapped with "
        "compute");
  const RunOptions ta = from_text(R"({"output_dir": "out", "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2, "learning_rate": 5e-05, "bf16": true, "fp16": false,
    "gradient_checkpointing": true, "optim": "paged_adamw_8bit",
    "fsdp": ["full_shard", "auto_wrap"], "fsdp_config": {"min_num_params": 0},
    "deepspeed": null, "seed": 42})",
                                  "args.json");
  CHECK(ta.batch->value == "8");
  CHECK(ta.grad_accum->value == "2");
  CHECK(said(ta.precision) == "amp-bf16 (args.json: bf16)");
  CHECK(ta.recompute->value == "full");
  CHECK(ta.optimizer->value == "adam8bit");
  CHECK(ta.paged_optimizer->value);
  CHECK(said(ta.fsdp) == "full (args.json: fsdp)");
  CHECK(ta.stack->value == "hf");
  REQUIRE(ta.from->not_modelled.size() == 1);
  CHECK(ta.from->not_modelled[0].starts_with("args.json: fsdp_config.min_num_params = 0: "));
  CHECK_THROWS_WITH(from_text(R"({"lr": 1})", "x.json"),
                    Catch::Matchers::StartsWith("x.json: not a config memest can read"));
  CHECK_THROWS_WITH(from_text("{", "x.json"),
                    Catch::Matchers::StartsWith("x.json: invalid JSON: "));
}

TEST_CASE("an axolotl config: base_model, QLoRA, all linear layers, packing, attention", "[from]") {
  // axolotl examples/llama-2/qlora.yml @067b021c8, unchanged (tests/data/from/SOURCES.md).
  const std::string path = memest::test::data_path("data/from/axolotl-067b021c8-llama-2-qlora.yml");
  const RunOptions o = memest::load_from_file(path, {}, {});
  CHECK(o.model->value == "NousResearch/Llama-2-7b-hf");
  CHECK(o.qlora->value);
  CHECK(o.lora_rank->value == "32");
  CHECK(o.lora_targets->value == "all-linear");
  CHECK(o.seq->value == "4096");
  CHECK(o.batch->value == "2");
  CHECK(o.grad_accum->value == "4");
  CHECK(o.precision->value == "bf16");  // bf16: auto
  CHECK(o.recompute->value == "full");
  CHECK(o.attention->value == "flash");  // attn_implementation: flash_attention_2
  CHECK(o.optimizer->value == "adamw");
  CHECK(o.paged_optimizer->value);  // paged_adamw_32bit
  CHECK(o.stack->value == "hf");
  CHECK(o.from->not_modelled.empty());
}

TEST_CASE("an accelerate config: processes, mixed precision and the FSDP plugin", "[from]") {
  const std::vector<std::string> overrides = {"num_processes=4"};
  const RunOptions o = memest::load_from_file(
      memest::test::data_path("data/from/accelerate-fsdp.yaml"), overrides, {});
  CHECK(said(o.data_parallel) == "4 (override num_processes=4)");
  CHECK(o.precision->value == "amp-bf16");
  CHECK(said(o.fsdp) == "full (" + memest::test::data_path("data/from/accelerate-fsdp.yaml") +
                            ": fsdp_config.fsdp_sharding_strategy)");
  CHECK(o.fsdp_orig_params->value);
  CHECK(o.fsdp_sync_module_states->value);
  CHECK_FALSE(o.offload);                   // fsdp_offload_params: false
  CHECK_FALSE(o.stack);                     // accelerate launches any training loop
  CHECK(o.from->not_modelled.size() == 4);  // wrap policy, both prefetches, RAM-efficient loading
}
