// Tensor, sequence, pipeline and context parallelism (src/parallel/layout.hpp): the split rules
// against Korthikanti et al. 2022's per-layer formulas and Megatron-LM's published per-rank
// counts and measured peaks (tests/data/gpu/SOURCES.md).
#include "parallel/layout.hpp"
#include "testutil.hpp"

#include <memest/config.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace memest::test {
namespace {

using nlohmann::json;

// A GPT layer as the paper draws it: LayerNorm, gelu MLP of 4h, fused qkv, dropout everywhere,
// eager attention, activations in 16 bits (no autocast), on CUDA.
const char* kGpt =
    R"({"model_type":"megatron_gpt","vocab_size":51200,"hidden_size":1024,"num_layers":4,)"
    R"("num_attention_heads":16,"max_position_embeddings":2048})";

// The routed experts' elements in the first stage's inventory of `preset` split t x ep ways.
std::uint64_t expert_elements(const char* preset, std::uint64_t t, std::uint64_t ep) {
  RunSpec run;
  run.model = load_model_preset(preset);
  run.training.micro_batch = 1;
  run.training.seq_len = 2048;
  run.parallel.tensor = t;
  run.parallel.expert = ep;
  run.parallel.data_parallel = 4;
  std::uint64_t n = 0;
  const auto stages = stage_runs(run);
  for (const TensorGroup& g : stages.front().model.inventory.groups) {
    if (g.role == Role::expert) n += g.elements();
  }
  return n;
}

std::uint64_t per_layer(std::vector<std::string> extra) {
  std::vector<std::string> args = {"--architecture", kGpt,    "--precision", "bf16",
                                   "--attention",    "eager", "--batch",     "2",
                                   "--seq",          "512"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_json(args)["activations"]["per_layer_bytes"].get<std::uint64_t>();
}

}  // namespace

// Korthikanti et al. 2022, eq. 2-4: s*b*h*(34 + 5as/h) bytes per layer; with t-way tensor
// parallelism s*b*h*(10 + 24/t + 5as/(ht)); with sequence parallelism as well
// s*b*h/t*(34 + 5as/h). The paper leaves out LayerNorm's fp32 mean and rstd (2 norms x 2 x 4 B
// per token, split by t under sequence parallelism) and the 2-byte score divisor.
TEST_CASE("per-layer activations follow Korthikanti et al. under tensor and sequence parallelism") {
  const double s = 512, b = 2, h = 1024, a = 16;
  const auto paper = [&](double t, bool sp) {
    const double core = 5 * a * s / h / t;
    return sp ? s * b * h * (34 / t + core) : s * b * h * (10 + 24 / t + core);
  };
  const auto stats = [&](double t, bool sp) { return 16 * s * b / (sp ? t : 1) + 2; };
  CHECK(per_layer({}) == static_cast<std::uint64_t>(paper(1, false) + stats(1, false)));
  for (const std::string t : {"2", "4", "8"}) {
    const double tv = std::stod(t);
    CHECK(per_layer({"--tp", t}) ==
          static_cast<std::uint64_t>(paper(tv, false) + stats(tv, false)));
    CHECK(per_layer({"--tp", t, "--sp"}) ==
          static_cast<std::uint64_t>(paper(tv, true) + stats(tv, true)));
  }
  // Selective recompute drops the 5as/h term (the paper's eq. 6).
  CHECK(per_layer({"--tp", "4", "--sp", "--recompute", "selective"}) ==
        static_cast<std::uint64_t>(s * b * h * 34 / 4 + stats(4, true) - 2));  // divisor too
}

// Megatron's TP4 7B GQA run: 1,713,299,456 parameters per rank (the reference's check of the
// published configuration: vocabulary 131,073 padded to 131,584, position table replicated).
TEST_CASE("tensor parallelism gives Megatron's per-rank parameter count") {
  const json j = run_json(
      {"--architecture",
       R"({"model_type":"megatron_gpt","vocab_size":131073,"hidden_size":4096,"num_layers":32,)"
       R"("num_attention_heads":32,"num_query_groups":8,"kv_channels":128,"ffn_hidden_size":16384,)"
       R"("max_position_embeddings":8192,"untie_embeddings_and_output_weights":true})",
       "--tp", "4", "--vocab-multiple", "128"});
  CHECK(j["parameters"]["total"].get<std::uint64_t>() == 1'713'299'456ULL);
}

TEST_CASE("pipeline stages keep the micro-batches in flight that their schedule says") {
  ParallelSpec p;
  p.pipeline = 4;
  CHECK(in_flight_microbatches(p, 0, 8) == 4);  // 1F1B: p - stage
  CHECK(in_flight_microbatches(p, 3, 8) == 1);
  CHECK(in_flight_microbatches(p, 0, 2) == 2);  // never more than the micro-batches
  p.virtual_stages = 8;                         // Megatron: 2(p - r - 1) + (v - 1)p, plus one
  CHECK(in_flight_microbatches(p, 3, 8) == 29);
  CHECK(in_flight_microbatches(p, 0, 8) == 35);
  CHECK(in_flight_microbatches(p, 0, 4) == 32);  // m == p: every micro-batch is warm-up
}

namespace {

std::vector<std::uint64_t> stage_layers(const json& j) {
  std::vector<std::uint64_t> out;
  for (const json& s : j["stages"]) out.push_back(s["layers"].get<std::uint64_t>());
  return out;
}

bool says(const json& j, std::string_view text) {
  for (const json& a : j["assumptions"])
    if (a.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

// torchtitan's generate_llm_fqn_per_model_part: L + 2 "layers" (the embeddings and the head one
// each) over p stages, the first (L + 2) % p taking one more. 61 + 2 = 63 over 16: 3 each and 15
// with a fourth, the first stage 4 - 1, the last 3 - 1. 126 + 2 = 128 over 16: 8 each, 7 at the
// ends.
TEST_CASE("layers that do not split evenly over the stages are split as torchtitan does") {
  const json ds = run_json({"--model", "deepseek-v3", "--pp", "16", "--tp", "8", "--ep", "8",
                            "--batch", "1", "--seq", "4096", "--precision", "bf16"});
  std::vector<std::uint64_t> want(16, 4);
  want.front() = 3;
  want.back() = 2;
  CHECK(stage_layers(ds) == want);
  CHECK(says(ds,
             "pipeline stages of 3, 4 x 14, 2 layers: 61 layers do not split evenly over 16 "
             "stages, so they are split as torchtitan does"));
  CHECK(ds["stages"][15]["layer_ranges"] == json::parse("[[59,60]]"));
  // The preset (configs/models/llama-3.1-405b.json): 126 layers, untied.
  const json big = run_json({"--model", "llama-3.1-405b", "--pp", "16", "--tp", "8", "--batch", "1",
                             "--seq", "8192", "--precision", "bf16"});
  CHECK(run_json({"--model", "llama-3.1-405b"})["parameters"]["total"] == 405'853'388'800ULL);
  std::vector<std::uint64_t> want405(16, 8);
  want405.front() = want405.back() = 7;
  CHECK(stage_layers(big) == want405);
  // Megatron-LM's counts instead: 3 first, 2 last, 56 over the 14 others.
  const json counted = run_json({"--model", "deepseek-v3", "--pp", "16", "--first-stage-layers",
                                 "3", "--last-stage-layers", "2", "--batch", "1", "--seq", "1024"});
  CHECK(stage_layers(counted) == want);
  CHECK(says(counted, "(--first-stage-layers / --last-stage-layers, the rest evenly)"));
  const json first_only = run_json({"--model", "gpt2", "--pp", "3", "--first-stage-layers", "2"});
  CHECK(stage_layers(first_only) == std::vector<std::uint64_t>{2, 5, 5});
}

TEST_CASE("a stage of an interleaved pipeline lists the layers of each of its chunks") {
  const char* k8 =
      R"({"model_type":"llama","vocab_size":32000,"hidden_size":512,"num_hidden_layers":8,)"
      R"("num_attention_heads":8,"intermediate_size":1024})";
  const std::vector<std::string> args = {"--architecture", k8,  "--pp",    "4", "--vpp", "2",
                                         "--microbatches", "8", "--batch", "1", "--seq", "256"};
  const json j = run_json(args);
  CHECK(j["stages"][0]["layer_ranges"] == json::parse("[[0,0],[4,4]]"));
  CHECK(j["stages"][3]["layer_ranges"] == json::parse("[[3,3],[7,7]]"));
  CHECK(j["stages"][0]["schedule"] == "interleaved-1f1b");
  const CliResult table = run_cli(args);
  CHECK_THAT(table.out, Catch::Contains("      0        0,4"));
  CHECK_THAT(table.out, Catch::Contains("      3        3,7"));
}

TEST_CASE("a layout that does not fit the model is refused, one line per problem") {
  const auto err = [](std::vector<std::string> args) {
    const CliResult r = run_cli(args);
    CHECK(r.code == 2);
    return r.err;
  };
  CHECK_THAT(err({"--model", "llama-2-7b", "--tp", "3"}),
             Catch::Contains("--tp 3: does not divide the attention heads (32)"));
  CHECK_THAT(err({"--model", "llama-3-8b", "--tp", "6"}),
             Catch::Contains("the 8 kv heads can be neither split nor replicated"));
  CHECK_THAT(err({"--model", "gpt2", "--pp", "5", "--vpp", "2", "--microbatches", "10"}),
             Catch::Contains("--pp 5 --vpp 2: 12 layers do not split evenly into 10 model chunks "
                             "(expected p x vpp to divide the layers, or --first-stage-layers / "
                             "--last-stage-layers)"));
  CHECK_THAT(err({"--model", "gpt2", "--pp", "2", "--first-stage-layers", "5",
                  "--last-stage-layers", "5"}),
             Catch::Contains("--first-stage-layers 5 --last-stage-layers 5: the other 2 layers"));
  CHECK_THAT(err({"--model", "gpt2", "--pp", "2", "--pp-schedule", "1f1b", "--vpp", "2"}),
             Catch::Contains("--pp-schedule 1f1b: one model chunk per rank"));

  CHECK_THAT(err({"--model", "gpt2", "--pp", "24"}), Catch::Contains("--pp 24"));
  CHECK_THAT(err({"--model", "llama-2-7b", "--cp", "2", "--batch", "1", "--seq", "1002"}),
             Catch::Contains("--cp 2: the sequence of 1002 tokens does not split"));
  CHECK_THAT(err({"--model", "llama-2-7b", "--ep", "2"}), Catch::Contains("no routed experts"));
  CHECK_THAT(err({"--model", "mixtral-8x7b", "--ep", "3"}),
             Catch::Contains("--ep 3: does not divide the 8 routed experts"));
  CHECK_THAT(err({"--model", "gpt2", "--sp"}), Catch::Contains("--sp"));
  CHECK_THAT(err({"--model", "gpt2", "--vpp", "2"}),
             Catch::Contains("--vpp: virtual stages need a pipeline"));
  CHECK_THAT(err({"--model", "gpt2", "--fsdp", "full"}), Catch::Contains("--dp N"));
}

// Megatron-LM's micro-batch groups (schedules.py @ d98e8a64ddf3): refused outside its range and
// with other schedules, one line each; a group of p is the default order, so the same bytes; a
// group of 3 over m 5 holds one pair more on the last stage than the default at m 4, one with
// the head (the hand derivation of tests/schedule_test.cpp: 3 others, one with the head, against
// 2).
TEST_CASE("Megatron-LM's micro-batch groups (--pp-microbatch-group): its rules and its bytes") {
  // One layer a chunk, so that the held pairs' activations make the stage's peak.
  const std::string arch =
      R"({"model_type":"llama","hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,)"
      R"("num_key_value_heads":2,"intermediate_size":688,"vocab_size":1000})";
  const std::vector<std::string> base = {"--architecture", arch, "--batch", "4", "--seq", "512",
                                         "--pp",           "2",  "--vpp",   "2"};
  const auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  const auto err = [](const std::vector<std::string>& args) {
    const CliResult r = run_cli(args);
    CHECK(r.code == 2);
    return r.err;
  };
  CHECK_THAT(err(with({"--microbatches", "7", "--pp-microbatch-group", "8"})),
             Catch::Contains("expected 2 <= N <= 7"));
  CHECK_THAT(err(with({"--microbatches", "7", "--pp-microbatch-group", "3"})),
             Catch::Contains("the last group of --microbatches 7 holds 1, fewer than --pp 2"));
  CHECK_THAT(err(with({"--microbatches", "4", "--pp-microbatch-group", "2", "--pp-schedule",
                       "looped-bfs"})),
             Catch::Contains("only Megatron-LM's interleaved schedule runs micro-batch groups"));
  CHECK_THAT(err({"--model", "gpt2", "--pp-microbatch-group", "2"}),
             Catch::Contains("--pp-microbatch-group: micro-batch groups are the interleaved"));
  const auto last = [&](std::vector<std::string> more) {
    return run_json(with(more))["stages"][1]["peak_bytes"].get<std::uint64_t>();
  };
  CHECK(last({"--microbatches", "4", "--pp-microbatch-group", "2"}) ==
        last({"--microbatches", "4"}));
  // m 6 in groups of 3: F3.1 runs after B2.1, so rank 1 holds 3 chunk-0 pairs and no head
  // besides the running pair: more than the default's 2 at m 4, less than m 5's head pair.
  const std::uint64_t m4 = last({"--microbatches", "4"});
  const std::uint64_t m6 = last({"--microbatches", "6", "--pp-microbatch-group", "3"});
  const std::uint64_t m5 = last({"--microbatches", "5", "--pp-microbatch-group", "3"});
  CHECK(m4 < m6);
  CHECK(m6 < m5);
}

TEST_CASE("kv heads fewer than the tensor-parallel ranks are replicated, and said so") {
  const json j = run_json({"--model", "llama-3-8b", "--tp", "16"});
  bool said = false;
  for (const json& a : j["assumptions"])
    said = said || a.get<std::string>().find("each rank holds one kv head") != std::string::npos;
  CHECK(said);
  // q: 4096/16 rows per rank; k and v: one head of 128 rows each, on every rank.
  RunSpec run = run_of("llama-3-8b", "bf16", 1, 128);
  run.parallel.tensor = 16;
  std::uint64_t k_rows = 0, q_rows = 0;
  const std::vector<RunSpec> stages = stage_runs(run);  // kept: the loop reads into it
  for (const TensorGroup& g : stages.front().model.inventory.groups) {
    if (g.name.find("k_proj") != std::string::npos) k_rows = g.rows;
    if (g.name.find("q_proj") != std::string::npos) q_rows = g.rows;
  }
  CHECK(q_rows == 256);
  CHECK(k_rows == 128);
}

TEST_CASE("the stages of a pipeline split the layers and hold the ends of the model") {
  const json j = run_json({"--model", "llama-2-7b", "--pp", "4", "--tp", "2", "--batch", "1",
                           "--seq", "4096", "--grad-accum", "8", "--precision", "mixed-bf16"});
  const json& st = j["stages"];
  REQUIRE(st.size() == 4);
  std::uint64_t layers = 0, worst = 0;
  for (const json& s : st) {
    layers += s["layers"].get<std::uint64_t>();
    worst += s["worst"].get<bool>() ? 1U : 0U;
    CHECK(s["needed_bytes"].get<std::uint64_t>() >= s["peak_bytes"].get<std::uint64_t>());
  }
  CHECK(layers == 32);
  CHECK(worst == 1);
  CHECK(st[0]["embedding"].get<bool>());
  CHECK(st[3]["head"].get<bool>());
  CHECK(st[0]["in_flight_microbatches"].get<std::uint64_t>() == 4);
  // The middle stages hold neither end of the model: the same layers, fewer parameters.
  CHECK(st[1]["parameters"].get<std::uint64_t>() < st[0]["parameters"].get<std::uint64_t>());
  CHECK(st[1]["parameters"] == st[2]["parameters"]);
  // Tensor parallelism halves the split parameters of a layer; the whole model is the sum.
  const json whole = run_json({"--model", "llama-2-7b"});
  std::uint64_t sum = 0;
  for (const json& s : st) sum += s["parameters"].get<std::uint64_t>();
  const auto total = whole["parameters"]["total"].get<std::uint64_t>();
  CHECK(sum * 2 < total + 2 * 4096 * 65 * 32);  // norms are replicated, not split
  CHECK(sum * 2 > total);
}

// fit on a split run searches with every stage's plan: the answer fits and the next does not.
TEST_CASE("fit on a split run answers with the stages' needs") {
  const json fit =
      run_json({"fit", "--model", "llama-2-7b", "--tp", "4", "--pp", "2", "--grad-accum", "4",
                "--seq", "4096", "--gpu", "h100-80gb", "--precision", "mixed-bf16"});
  const auto best = fit["best"].get<std::uint64_t>();
  REQUIRE(best > 0);
  const auto need_at = [&](std::uint64_t b) {
    return run_json({"--model", "llama-2-7b", "--tp", "4", "--pp", "2", "--grad-accum", "4",
                     "--seq", "4096", "--precision", "mixed-bf16", "--batch",
                     std::to_string(b)})["peak"]["needed_bytes"]
        .get<std::uint64_t>();
  };
  const auto usable = fit["budget"]["usable_bytes"].get<std::uint64_t>();
  CHECK(need_at(best) <= usable);
  CHECK(need_at(best + 1) > usable);
  CHECK(need_at(best) == fit["need_at_best_bytes"].get<std::uint64_t>());
}

TEST_CASE("fit --gpus lists the layouts that fit, each as its own estimate says") {
  const json j = run_json({"fit", "--gpus", "8", "--model", "llama-2-7b", "--seq", "2048", "--gpu",
                           "a10", "--precision", "mixed-bf16", "--attention", "flash"});
  CHECK_FALSE(j["speed_modelled"].get<bool>());
  const json& layouts = j["layouts"];
  REQUIRE(layouts.size() > 1);
  const auto usable = j["usable_bytes"].get<std::uint64_t>();
  std::uint64_t last = ~0ULL;
  for (const json& l : layouts) {
    const auto tp = l["tensor_parallel"].get<std::uint64_t>();
    const auto pp = l["pipeline_parallel"].get<std::uint64_t>();
    const auto cp = l["context_parallel"].get<std::uint64_t>();
    const auto dp = l["data_parallel"].get<std::uint64_t>();
    CHECK(tp * pp * cp * dp == 8);
    const auto headroom = l["headroom_bytes"].get<std::uint64_t>();
    CHECK(headroom <= last);  // most headroom first
    last = headroom;
    CHECK(l["need_bytes"].get<std::uint64_t>() + headroom == usable);
  }
  // The first layout, estimated on its own, needs what the search said.
  const json& f = layouts.front();
  std::vector<std::string> args = {"--model",     "llama-2-7b",
                                   "--seq",       "2048",
                                   "--batch",     "1",
                                   "--precision", "mixed-bf16",
                                   "--attention", "flash",
                                   "--tp",        std::to_string(f["tensor_parallel"].get<int>()),
                                   "--pp",        std::to_string(f["pipeline_parallel"].get<int>()),
                                   "--cp",        std::to_string(f["context_parallel"].get<int>()),
                                   "--dp",        std::to_string(f["data_parallel"].get<int>()),
                                   "--recompute", f["recompute"].get<std::string>()};
  if (f["zero_stage"].get<int>() > 0) {
    args.emplace_back("--zero");
    args.push_back(std::to_string(f["zero_stage"].get<int>()));
  }
  if (f["microbatches"].get<int>() > 0) {
    args.emplace_back("--microbatches");
    args.push_back(std::to_string(f["microbatches"].get<int>()));
  }
  CHECK(run_json(args)["peak"]["needed_bytes"].get<std::uint64_t>() ==
        f["need_bytes"].get<std::uint64_t>());
  // One GPU cannot hold a 7B model's mixed-precision Adam states: no layout of one fits.
  const CliResult one = run_cli({"fit", "--gpus", "1", "--model", "llama-2-7b", "--seq", "4096",
                                 "--gpu", "a100-40gb", "--precision", "mixed-bf16"});
  CHECK(one.code == 1);
  CHECK_THAT(one.out, Catch::Contains("speed is not modelled"));
}

}  // namespace memest::test

namespace memest::test {

TEST_CASE("a layout problem in a run config names the file and the key") {
  const std::string path =
      (std::filesystem::temp_directory_path() / "memest_parallel_test_layout.json").string();
  std::ofstream(path) << R"({"model": "llama-2-7b", "parallel": {"tensor_parallel": 3}})";
  const CliResult r = run_cli({"--file", path});
  std::remove(path.c_str());
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("parallel_test_layout.json: /parallel/tensor_parallel 3: does "
                                    "not divide the attention heads (32)"));
}

}  // namespace memest::test

namespace memest::test {

// PyTorch DDP's reducer keeps a flat copy of every gradient in its buckets unless the gradients
// are views into them (gradient_as_bucket_view=True).
TEST_CASE("plain DDP's all-reduce buckets hold a second copy of the gradients") {
  const auto peak = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--model", "gpt2", "--batch",     "2",
                                     "--seq",   "512",  "--precision", "mixed-bf16"};
    args.insert(args.end(), extra.begin(), extra.end());
    const json j = run_json(args);
    return std::pair{j["peak"]["bytes"].get<std::uint64_t>(),
                     j["categories"]["grads"]["bytes"].get<std::uint64_t>()};
  };
  const auto [ddp, grads] = peak({"--dp", "8"});
  const auto [view, grads_view] = peak({"--dp", "8", "--ddp-bucket-view"});
  const auto [one, grads_one] = peak({});
  CHECK(view == one);
  CHECK(grads_view == grads_one);
  CHECK(ddp == view + grads);
  CHECK(peak({"--dp", "8", "--zero", "1"}).first < ddp);  // ZeRO keeps no such buckets
}

}  // namespace memest::test

namespace memest::test {

// ZeRO-3 with parameter offload: the parameter and gradient shards leave the device, which keeps
// the layer being computed and the prefetched next (docs/parallelism.md).
TEST_CASE("parameter offload moves the parameter and gradient shards to the host") {
  const std::vector<std::string> base = {"--model", "llama-2-7b", "--batch",     "1",
                                         "--seq",   "2048",       "--precision", "mixed-bf16",
                                         "--dp",    "8",          "--zero",      "3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_json(args);
  };
  const json opt = with({"--offload", "optimizer"});
  const json params = with({"--offload", "params"});
  CHECK(params["categories"]["params"]["location"] == "host");
  CHECK(params["categories"]["grads"]["location"] == "host");
  CHECK(opt["categories"]["params"]["location"] == "device");
  const auto shards = params["categories"]["params"]["bytes"].get<std::uint64_t>();
  // The device no longer holds the parameter shard at the peak; at least that much is saved.
  CHECK(params["peak"]["bytes"].get<std::uint64_t>() + shards <=
        opt["peak"]["bytes"].get<std::uint64_t>());
  bool gathered = false;
  for (const json& t : params["peak"]["live"])
    gathered =
        gathered || t["name"].get<std::string>().find("gathered parameters") != std::string::npos;
  CHECK(gathered);
  const CliResult r = run_cli({"--model", "llama-2-7b", "--dp", "8", "--offload", "params"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("--offload params: parameters are offloaded from ZeRO-3"));
}

}  // namespace memest::test

namespace memest::test {

// Megatron-LM's theoretical_memory_usage.py (@d98e8a6, compute_weight_and_optimizer_memory) on
// Llama-2-7B (h 4096, SwiGLU MLP of I 11008, 32 layers, vocabulary 32000 untied, RMSNorm) at
// t = 2, p = 4, bf16 with fp32 main grads: 18 B per parameter of its "most loaded shard", the
// first stage. Per layer the tensor-parallel part is attention 2h^2(1 + 1) plus MLP 2hI x 3/2;
// the replicated part two norms of h, plus the final norm h once for the model, which the
// formula divides by p like the layers. First stage: (L/p x split + hV)/t + (2hL + h)/p; the
// "other shards": L/p x split / t + (2hL + h)/p. memest keeps the final norm whole on the last
// stage (Megatron-core builds final_layernorm there), so both are h/p parameters below the formula.
TEST_CASE("model states per stage are Megatron's theoretical formula, final norm aside") {
  const double h = 4096, ffn = 11008, layers = 32, vocab = 32000, t = 2, p = 4;
  const double split = 2 * h * h * 2 + 2 * h * ffn * 1.5;
  const double replicated = 2 * h * layers + h;
  const double first = (layers / p * split + h * vocab) / t + replicated / p;
  const double other = layers / p * split / t + replicated / p;
  const json j =
      run_json({"--model", "llama-2-7b", "--tp", "2", "--pp", "4", "--batch", "1", "--seq", "4096",
                "--grad-accum", "8", "--precision", "mixed-bf16-fp32grad", "--optimizer", "adam"});
  const json& st = j["stages"];
  REQUIRE(st.size() == 4);
  REQUIRE(st[0]["worst"].get<bool>());  // the category rows are the first stage's
  const json& c = j["categories"];
  const std::uint64_t states = c["params"]["bytes"].get<std::uint64_t>() +
                               c["master_weights"]["bytes"].get<std::uint64_t>() +
                               c["grads"]["bytes"].get<std::uint64_t>() +
                               c["optimizer_states"]["bytes"].get<std::uint64_t>();
  CHECK(states == static_cast<std::uint64_t>(18 * (first - h / p)));
  CHECK(st[1]["parameters"].get<std::uint64_t>() == static_cast<std::uint64_t>(other - h / p));
  CHECK(st[2]["parameters"].get<std::uint64_t>() == static_cast<std::uint64_t>(other - h / p));
}

}  // namespace memest::test

namespace memest::test {

// Megatron-LM shards with its distributed optimizer (ZeRO-1) and runs no ZeRO-2 or -3; a model
// with routed experts is tried with expert parallelism inside the data-parallel ranks.
TEST_CASE("fit --gpus searches what the stack runs, and expert parallelism for MoE models") {
  const json megatron =
      run_json_answer({"fit", "--gpus", "16", "--model", "llama-2-7b", "--gpu", "h100-80gb",
                       "--seq", "4096", "--batch", "1", "--stack", "megatron"});
  const json plain = run_json_answer({"fit", "--gpus", "16", "--model", "llama-2-7b", "--gpu",
                                      "h100-80gb", "--seq", "4096", "--batch", "1"});
  std::set<unsigned> stages, plain_stages;
  for (const json& l : megatron["layouts"]) stages.insert(l["zero_stage"].get<unsigned>());
  for (const json& l : plain["layouts"]) plain_stages.insert(l["zero_stage"].get<unsigned>());
  CHECK(stages == std::set<unsigned>{0, 1});
  CHECK(plain_stages.contains(3));
  const json moe =
      run_json_answer({"fit", "--gpus", "64", "--model", "mixtral-8x7b", "--gpu", "h100-80gb",
                       "--seq", "4096", "--batch", "1", "--precision", "mixed-bf16"});
  std::set<std::uint64_t> eps;
  for (const json& l : moe["layouts"]) eps.insert(l["expert_parallel"].get<std::uint64_t>());
  CHECK(eps == std::set<std::uint64_t>{1, 2, 4, 8});  // 8 experts
  // Megatron-LM runs 1F1B and interleaved 1F1B; without a stack torch.distributed.pipelining's
  // schedules are searched too, each with the chunks it runs.
  for (const json& l : megatron["layouts"]) {
    const bool interleaved = l["virtual_stages"] == 2;
    CHECK(l["schedule"] == (l["pipeline_parallel"] == 1 ? json()
                            : interleaved               ? json("interleaved-1f1b")
                                                        : json("1f1b")));
  }
  std::set<std::string> schedules;
  for (const json& l : plain["layouts"]) {
    CHECK(l["expert_parallel"] == 1);
    if (l["pipeline_parallel"] == 1) {
      CHECK(l["schedule"] == json());
      continue;
    }
    const std::string name = l["schedule"].get<std::string>();
    schedules.insert(name);
    CHECK(l["virtual_stages"] == (name == "1f1b" ? 1 : 2));
  }
  CHECK(schedules == std::set<std::string>{"1f1b", "interleaved-1f1b", "looped-bfs",
                                           "interleaved-zero-bubble", "zbv-zero-bubble",
                                           "dualpipev"});
}

// Expert parallelism keeps E / ep of every MoE layer's routed experts on a rank, with tensor
// parallelism splitting each expert's intermediate dimension as well (--tp was ignoring --ep).
TEST_CASE("expert parallelism: a rank holds E / ep of each layer's experts, with or without --tp") {
  // configs/models/mixtral-8x7b.json: 32 layers of 8 experts, each w1 and w3 of I x h and w2 of
  // h x I, h = 4096, I = 14336 (column- and row-parallel: I splits t ways).
  const std::uint64_t L = 32, E = 8, h = 4096, I = 14336;
  const auto derived = [&](std::uint64_t t, std::uint64_t ep) {
    return L * (E / ep) * 3 * h * (I / t);
  };
  for (const std::uint64_t t : {1U, 2U}) {
    for (const std::uint64_t ep : {1U, 2U, 4U, 8U}) {
      CAPTURE(t, ep);
      CHECK(expert_elements("mixtral-8x7b", t, ep) == derived(t, ep));
    }
  }
  // The per-device parameters of the command line differ by the experts the other ranks hold.
  const auto params = [](std::string t, std::string ep) {
    return run_json({"--model", "mixtral-8x7b", "--tp", t, "--ep", ep, "--dp", "4", "--batch", "1",
                     "--seq", "2048", "--precision", "bf16"})["parameters"]["total"]
        .get<std::uint64_t>();
  };
  CHECK(params("2", "1") - params("2", "4") == derived(2, 1) - derived(2, 4));
  CHECK(params("1", "1") - params("1", "4") == derived(1, 1) - derived(1, 4));
  // gpt-oss stores a layer's 32 experts as one [E, ...] tensor each for up, down and their
  // biases: the expert rows split.
  CHECK(expert_elements("gpt-oss-20b", 1, 4) * 4 == expert_elements("gpt-oss-20b", 1, 1));
  CHECK(expert_elements("gpt-oss-20b", 1, 4) < expert_elements("gpt-oss-20b", 1, 1));
}

}  // namespace memest::test

namespace memest::test {
namespace {

// A small Mixtral: h 64, I 32, 8 experts, top 2, 2 layers; b 2, s 16, so N = 32 tokens.
const char* kSmallMoe =
    R"({"model_type":"mixtral","vocab_size":1000,"hidden_size":64,"num_hidden_layers":2,)"
    R"("num_attention_heads":4,"num_key_value_heads":4,"intermediate_size":32,)"
    R"("num_local_experts":8,"num_experts_per_tok":2})";

std::map<std::string, std::uint64_t> moe_terms(std::vector<std::string> extra,
                                               const std::string& dispatcher = "alltoall",
                                               const std::string& precision = "bf16") {
  std::vector<std::string> args = {"--architecture",   kSmallMoe, "--precision", precision,
                                   "--batch",          "2",       "--seq",       "16",
                                   "--moe-dispatcher", dispatcher};
  args.insert(args.end(), extra.begin(), extra.end());
  std::map<std::string, std::uint64_t> out;
  const json doc = run_json(args);  // the terms are read from it: keep it alive
  for (const json& t : doc["activations"]["terms"])
    if (t["name"].get<std::string>().starts_with("MoE"))
      out[t["name"].get<std::string>()] = t["bytes"].get<std::uint64_t>();
  return out;
}

}  // namespace

// Megatron-LM's all-to-all dispatcher (docs/parallelism.md, "Expert parallelism's own memory"),
// for one MoE layer of one rank, from the shapes above (N = 32, k = 2, E = 8, h = 64, I = 32;
// bf16 = 2 B): the router keeps N x k int64 indices (512 B) and N x k fp32 softmax outputs
// (256 B), the dispatcher an N x E bool routing map (256 B) and two N x k int64 permutations
// (1,024 B); the experts' R received rows keep fc1's input (R x h), fc1's output (R x 2I, the
// SwiGLU input) and fc2's input (R x I) in bf16, and R probabilities in the logits' dtype, bf16
// here (router.py gating: router_dtype = input.dtype; moe_utils.py: probs.type_as(logits)).
TEST_CASE("the all-to-all dispatcher's tensors: router, permutation and the rows received") {
  const auto rows = [](std::uint64_t R) {
    return std::map<std::string, std::uint64_t>{
        {"MoE router: top-k expert indices (int64)", 8 * 32 * 2},
        {"MoE router: softmax of the top-k scores (fp32)", 4 * 32 * 2},
        {"MoE dispatcher: routing map (bool)", 32 * 8},
        {"MoE dispatcher: token and probability permutation indices (int64)", 2 * 8 * 32 * 2},
        {"MoE experts: fc1 input (the rows received)", 2 * R * 64},
        {"MoE experts: fc1 output (SwiGLU input)", 2 * R * 2 * 32},
        {"MoE experts: fc2 input (activation output)", 2 * R * 32},
        {"MoE experts: routing probabilities received (the logits' dtype)", 2 * R}};
  };
  // Balanced: R = N x k = 64, whatever the expert-parallel size.
  CHECK(moe_terms({"--ep", "4", "--dp", "4"}) == rows(64));
  CHECK(moe_terms({}) == rows(64));
  // The worst case at e = 4: each rank holds E/e = 2 experts, every token of the 4 ranks picks
  // both (k = 2 <= 2): R = 4 x 32 x 2 = 256.
  CHECK(moe_terms({"--ep", "4", "--dp", "4", "--moe-routing", "worst"}) == rows(256));
  // At e = 8 a rank holds one expert, which a token picks once: R = 8 x 32 x 1 = 256.
  CHECK(moe_terms({"--ep", "8", "--dp", "8", "--moe-routing", "worst"}) == rows(256));
  // A capacity factor of 1.25 bounds the rows at N x k x 1.25 = 80.
  CHECK(moe_terms({"--ep", "4", "--dp", "4", "--moe-capacity-factor", "1.25"}) == rows(80));
  // The hf dispatcher keeps what transformers' MixtralSparseMoeBlock keeps instead.
  const json hf =
      run_json({"--architecture", kSmallMoe, "--precision", "bf16", "--batch", "2", "--seq", "16"});
  for (const json& t : hf["activations"]["terms"])
    CHECK_FALSE(t["name"].get<std::string>().starts_with("MoE router"));
}

// Megatron-LM's all-gather dispatcher (token_dispatcher.py @ d98e8a64ddf3), the same small
// Mixtral: the router's tensors and the experts' rows as the all-to-all's; the dispatcher keeps
// the local routing map, N e x E/e bools, and its transposed copy (masked_select's mask), N x E =
// 256 B each whatever e, and R int64 permutation indices (8 R B).
TEST_CASE("the all-gather dispatcher's tensors: the local maps and the rows kept") {
  const auto rows = [](std::uint64_t R) {
    return std::map<std::string, std::uint64_t>{
        {"MoE router: top-k expert indices (int64)", 8 * 32 * 2},
        {"MoE router: softmax of the top-k scores (fp32)", 4 * 32 * 2},
        {"MoE dispatcher: local routing map (bool, local_map)", 32 * 8},
        {"MoE dispatcher: transposed local routing map (bool, masked_select's mask)", 32 * 8},
        {"MoE dispatcher: permutation indices of the rows kept (int64)", 8 * R},
        {"MoE experts: fc1 input (the rows received)", 2 * R * 64},
        {"MoE experts: fc1 output (SwiGLU input)", 2 * R * 2 * 32},
        {"MoE experts: fc2 input (activation output)", 2 * R * 32},
        {"MoE experts: routing probabilities received (the logits' dtype)", 2 * R}};
  };
  // Balanced: the e x N = 128 gathered tokens pick 2 of 8 experts each, 2/8 of them this rank's
  // 2 experts: R = 128 x 2 x 2 / 8 = 64 = N x k.
  CHECK(moe_terms({"--ep", "4", "--dp", "4"}, "allgather") == rows(64));
  CHECK(moe_terms({}, "allgather") == rows(64));
  CHECK(moe_terms({"--ep", "4", "--dp", "4", "--moe-routing", "worst"}, "allgather") == rows(256));
  CHECK(moe_terms({"--ep", "4", "--dp", "4", "--moe-capacity-factor", "1.25"}, "allgather") ==
        rows(80));
  CHECK_THAT(run_cli({"--model", "llama-2-7b", "--moe-dispatcher", "allgather"}).err,
             Catch::Contains("--moe-dispatcher allgather: the model has no routed experts"));
}

// The all-gather dispatcher's backward: a candidate moment of the MoE layer's backward as the
// all-to-all's is, with other buffers. At --ep 4 (N = 32, h = 64, bf16, R = 64) it holds
// ec N e h = 2 x 32 x 4 x 64 = 16,384 B of gathered tokens (the global buffer), as many of their
// gradients and ec R h = 8,192 B of rows, 40,960 B; the all-to-all's holds ec N k h = 8,192 B sent
// and 8,192 B received, 16,384 B. The layers' saved dispatcher tensors differ too: alltoall
// 256 + 1,024 B a layer, allgather 256 + 256 + 8 x 64 = 1,024 B. Layer 0's backward holds one
// layer's saved tensors, layer 1's (the last) both: the moments differ by 24,576 - 256 and
// 24,576 - 512 bytes.
TEST_CASE("the all-gather dispatcher's backward buffers, exactly") {
  const auto moments = [](const std::string& dispatcher) {
    const json doc =
        run_json({"--architecture", kSmallMoe, "--precision", "bf16", "--batch", "2", "--seq", "16",
                  "--ep", "4", "--dp", "4", "--moe-dispatcher", dispatcher});
    std::map<std::string, std::int64_t> out;
    for (const json& m : doc["peak"]["moments"])
      out[m["name"].get<std::string>()] = m["bytes"].get<std::int64_t>();
    return out;
  };
  const auto a2a = moments("alltoall"), ag = moments("allgather");
  CHECK(ag.at("backward_mlp_first_layer") - a2a.at("backward_mlp_first_layer") == 24'576 - 256);
  CHECK(ag.at("backward_mlp_last_layer") - a2a.at("backward_mlp_last_layer") == 24'576 - 512);
}

// torchtitan's MoE layer (torchtitan @ b5bcd76c6, models/common/moe.py, token_dispatcher.py;
// docs/parallelism.md), one MoE layer of one rank of the small Mixtral (N = 32, k = 2, E = 8,
// h = 64, I = 32, bf16): the gate under autocast to fp32 keeps fp32 copies of its input (N x h)
// and weight (E x h), softmax its fp32 N x E output, topk its N x k int64 indices; the dispatch
// two N x k int64 index tensors (argsort's, and the token indices it maps to), under EP R int64
// permutation indices; the experts' bf16 grouped mms keep the R rows (R x h) and four R x I
// tensors (w1's output, silu's, w3's, their product); combine keeps the N x k routed outputs
// in fp32 (N x k x h) and the N x k fp32 scores.
TEST_CASE("torchtitan's MoE layer: router, dispatch, grouped experts and combine, exactly") {
  const std::uint64_t N = 32, k = 2, E = 8, h = 64, I = 32;
  const auto terms = [&](std::uint64_t R, bool ep, bool fp32, std::uint64_t local) {
    std::map<std::string, std::uint64_t> t{
        {"MoE router: scores (fp32 softmax or sigmoid output)", 4 * N * E},
        {"MoE router: top-k expert indices (int64)", 8 * N * k},
        {"MoE dispatch: argsort of the expert indices (int64)", 8 * N * k},
        {"MoE dispatch: token indices in expert order (int64)", 8 * N * k},
        {"MoE experts: grouped mm input (bf16 rows)", 2 * R * h},
        {"MoE experts: w1 output (silu input)", 2 * R * I},
        {"MoE experts: silu output", 2 * R * I},
        {"MoE experts: w3 output", 2 * R * I},
        {"MoE experts: silu x w3 (w2 input)", 2 * R * I},
        {"MoE combine: routed outputs in fp32 (kept by the scores' multiply)", 4 * N * k * h},
        {"MoE combine: scores in expert order (fp32)", 4 * N * k}};
    if (ep) t["MoE dispatch: expert-major permutation of the rows received (int64)"] = 8 * R;
    if (fp32) {  // no autocast copies; x.bfloat16() and w.bfloat16() copy the weights
      t["MoE experts: bf16 copies of the rank's expert weights"] = 2 * 3 * local * I * h;
    } else {
      t["MoE router: gate input in fp32 (autocast to float32)"] = 4 * N * h;
      t["MoE router: gate weight in fp32 (autocast to float32)"] = 4 * E * h;
    }
    return t;
  };
  CHECK(moe_terms({}, "torchtitan") == terms(N * k, false, false, E));
  CHECK(moe_terms({"--ep", "4", "--dp", "4"}, "torchtitan") == terms(N * k, true, false, E / 4));
  // Dropless, the worst case: the 4 ranks' tokens all routed here, min(k, E/e) = 2 each.
  CHECK(moe_terms({"--ep", "4", "--dp", "4", "--moe-routing", "worst"}, "torchtitan") ==
        terms(4 * N * 2, true, false, E / 4));
  CHECK(moe_terms({"--ep", "4", "--dp", "4"}, "torchtitan", "fp32") ==
        terms(N * k, true, true, E / 4));
}

// The combine's backward under torchtitan: the cast's fp32 gradient of the N x k routed outputs
// and MulBackward0's two full-size gradients, 3 x 4 N k h = 3 x 16,384 B, beside the layer's
// saved tensors. With a 16-token vocabulary the loss is small and this moment is the peak at
// --ep 4.
TEST_CASE("torchtitan's combine backward holds three fp32 copies of the routed outputs") {
  const std::string arch =
      R"({"model_type":"mixtral","vocab_size":16,"hidden_size":64,"num_hidden_layers":2,)"
      R"("num_attention_heads":4,"num_key_value_heads":4,"intermediate_size":32,)"
      R"("num_local_experts":8,"num_experts_per_tok":2})";
  const json doc = run_json({"--architecture", arch, "--precision", "bf16", "--batch", "2", "--seq",
                             "16", "--ep", "4", "--dp", "4", "--moe-dispatcher", "torchtitan"});
  REQUIRE(doc["peak"]["moment"] == "backward_mlp_last_layer");
  std::map<std::string, std::uint64_t> live;
  for (const json& t : doc["peak"]["live"])
    if (t["name"].get<std::string>().starts_with("MoE combine backward"))
      live[t["name"].get<std::string>()] = t["bytes"].get<std::uint64_t>();
  const std::uint64_t routed = 4 * 32 * 2 * 64;
  CHECK(live == std::map<std::string, std::uint64_t>{
                    {"MoE combine backward: fp32 gradient of the routed outputs", routed},
                    {"MoE combine backward: gradient of the routed outputs (MulBackward0)", routed},
                    {"MoE combine backward: gradient of the scores before its sum (MulBackward0)",
                     routed}});
}

TEST_CASE("torchtitan's MoE layer: its options and refusals") {
  CHECK_THAT(run_cli({"--model", "llama-2-7b", "--moe-dispatcher", "torchtitan"}).err,
             Catch::Contains("--moe-dispatcher torchtitan: the model has no routed experts"));
  CHECK_THAT(run_cli({"--model", "mixtral-8x7b", "--moe-dispatcher", "torchtitan",
                      "--moe-capacity-factor", "1.25"})
                 .err,
             Catch::Contains("--moe-capacity-factor applies to --moe-dispatcher alltoall or "
                             "allgather"));
  CHECK_THAT(run_cli({"--model", "mixtral-8x7b", "--moe-dispatcher", "torchtitan", "--tp", "2",
                      "--ep", "2", "--dp", "2"})
                 .err,
             Catch::Contains("--moe-dispatcher torchtitan: torchtitan's MoE under --tp 2 with --ep "
                             "2"));
  CHECK_THAT(run_cli({"--model", "gpt-oss-20b", "--moe-dispatcher", "torchtitan"}).err,
             Catch::Contains("torchtitan's gpt-oss has a MoE layer of its own"));
  // With EP off, TP splits each expert's width and not the routed tokens (no --sp needed).
  const auto t2 = moe_terms({"--tp", "2"}, "torchtitan");
  CHECK(t2.at("MoE experts: w1 output (silu input)") == 2 * 32 * 2 * 16);
  CHECK(t2.at("MoE experts: grouped mm input (bf16 rows)") == 2 * 32 * 2 * 64);
}

TEST_CASE("the all-to-all dispatcher's options and their rules") {
  CHECK_THAT(run_cli({"--model", "llama-2-7b", "--moe-dispatcher", "alltoall"}).err,
             Catch::Contains("--moe-dispatcher alltoall: the model has no routed experts"));
  CHECK_THAT(run_cli({"--model", "mixtral-8x7b", "--moe-routing", "worst"}).err,
             Catch::Contains("--moe-routing applies to --moe-dispatcher alltoall, allgather or "
                             "torchtitan"));
  CHECK_THAT(run_cli({"--model", "mixtral-8x7b", "--moe-dispatcher", "alltoall", "--tp", "2"}).err,
             Catch::Contains("refuses --tp 2 without sequence parallelism"));
  CHECK_THAT(run_cli({"--model", "mixtral-8x7b", "--moe-dispatcher", "alltoall",
                      "--moe-capacity-factor", "0"})
                 .err,
             Catch::Contains("expected a capacity factor in (0, 64], got \"0\""));
}

// Mixtral-8x7B's routed experts are 32 layers x 8 experts x 3 x 4096 x 14336 = 45,097,156,608
// of its 46,702,792,704 parameters; --ep 8 leaves each rank one expert a layer: 1,605,636,096 +
// 45,097,156,608 / 8 = 7,242,780,672. (The stage's per-layer count used to overwrite the
// expert share, so --ep split nothing.)
TEST_CASE("issue 22: --ep splits the routed experts of every layer") {
  const json one = run_json({"--model", "mixtral-8x7b", "--ep", "8", "--dp", "8"});
  CHECK(one["parameters"]["total"] == 7'242'780'672ULL);
  const json staged = run_json({"--model", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--pp", "2"});
  std::uint64_t sum = 0;
  for (const json& s : staged["stages"]) sum += s["parameters"].get<std::uint64_t>();
  CHECK(sum == 7'242'780'672ULL);  // the stages hold the same share between them
}

}  // namespace memest::test
