#!/usr/bin/env python3
"""Differential runs: the same random command lines through two memest binaries.

A refactor that must not change any output (docs/design.md, "Refactors and the differential
run") is checked by drawing command lines across every run option, running them through the old
and the new binary and comparing exit codes, standard output (the JSON document without its
`inputs` echo, which may change shape, and the layout's `schema_version`; a layout-1 document's
`inputs` is compared as layout 2's `run`), standard error and any --plot picture.

    python3 scripts/differential.py draw N SEED > runs.jsonl     # N command lines
    python3 scripts/differential.py run BINARY runs.jsonl > results.jsonl
    python3 scripts/differential.py compare old.jsonl new.jsonl  # exit 1 on any difference
    python3 scripts/differential.py flags BINARY                 # flags of --help not drawn

Every flag of `memest --help` must have a generator below (`flags` lists those that do not), so
a new option is drawn as soon as it exists.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "configs/models"))
                if f.endswith(".json"))
SMALL = ["gpt2", "llama-3.2-1b", "pythia-70m", "opt-125m", "qwen2.5-0.5b", "tinyllama-1.1b",
         "bert-base-uncased", "llama-2-7b", "smollm2-135m", "qwen3-0.6b", "gemma-3-1b-it",
         "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v2-lite", "phi-1.5", "mamba-2.8b"]
DTYPES = ["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", "nf4"]
GPUS = ["t4", "v100-16gb", "a10", "l4", "rtx-4090", "a100-40gb", "a100-80gb", "h100-80gb",
        "h200-141gb", "mi300x"]
ROLES = ["embedding", "position", "attention", "mlp", "norm", "head", "router", "expert",
         "adapter", "other"]
TARGETS = ["q", "k", "v", "o", "gate", "up", "down"]
ARCH = json.dumps({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 688, "vocab_size": 1000})


def subset(r, items, most=3):
    return ",".join(r.sample(items, r.randint(1, min(most, len(items)))))


# flag -> a function of the generator giving its value; None for an on/off flag.
VALUES = {
    "--params": lambda r: r.choice(["7B", "1.3B", "125M", "70B", "6738415616", "1.3e9", "0"]),
    "--model": lambda r: r.choice(SMALL + MODELS + ["meta-llama/Llama-2-7b-hf", "nope"]),
    "--config": lambda r: os.path.join(ROOT, "configs/models", r.choice(SMALL[:8]) + ".json"),
    "--architecture": lambda r: ARCH,
    "--freeze": lambda r: subset(r, ROLES),
    "--lora-rank": lambda r: str(r.choice([1, 8, 16, 64, 0])),
    "--lora-targets": lambda r: r.choice([subset(r, TARGETS, 7), "all-linear", "q,x"]),
    "--lora-dropout": lambda r: r.choice(["0", "0.05", "0.1", "1.5"]),
    "--qlora": None, "--double-quant": None, "--qlora-keeps-input": None,
    "--qlora-init": lambda r: r.choice(["none", "whole", "chunked"]),
    "--model-code": lambda r: r.choice(["hf", "litgpt"]),
    "--layer-clones": None,
    "--model-loading": lambda r: r.choice(["none", "layer-clones", "nf4-whole", "nf4-chunked",
                                           "layer-clones,nf4-whole", "fsdp-sync", "full"]),
    "--optimizer": lambda r: r.choice(["sgd", "sgd-momentum", "adam", "adamw", "adagrad",
                                       "rmsprop", "lion", "adafactor", "adam8bit"]),
    "--nesterov": None, "--amsgrad": None, "--rmsprop-momentum": None, "--centered": None,
    "--first-moment": None,
    "--optimizer-impl": lambda r: r.choice(["foreach", "single", "fused"]),
    "--fused-optimizer": None, "--paged-optimizer": None, "--optimizer-in-backward": None,
    "--precision": lambda r: r.choice(["fp32", "amp", "amp-bf16", "mixed", "mixed-bf16",
                                       "mixed-fp32grad", "mixed-bf16-fp32grad", "bf16", "fp16"]),
    "--amp": None,
    "--param-dtype": lambda r: r.choice(DTYPES),
    "--grad-dtype": lambda r: r.choice(DTYPES[:3]),
    "--master-dtype": lambda r: r.choice(DTYPES[:3] + ["none"]),
    "--state-dtype": lambda r: r.choice(DTYPES[:3] + ["int8"]),
    "--activation-dtype": lambda r: r.choice(DTYPES[:3]),
    "--working-dtype": lambda r: r.choice(DTYPES[:3] + ["none"]),
    "--grad-accum-dtype": lambda r: r.choice(DTYPES[:3] + ["none"]),
    "--batch": lambda r: str(r.choice([1, 1, 2, 3, 4, 8, 16])),
    "--seq": lambda r: str(r.choice([16, 128, 512, 1000, 2048, 4096, 8192])),
    "--grad-accum": lambda r: str(r.choice([1, 2, 4, 8])),
    "--attention": lambda r: r.choice(["eager", "sdpa", "flash"]),
    "--recompute": lambda r: r.choice(["none", "selective", "full", "op"]),
    "--compile": None,
    "--stack": lambda r: r.choice(["hf", "torchtune", "litgpt", "torchtitan", "megatron",
                                   "fsdp-qlora"]),
    "--versions": lambda r: r.choice(["torch=1.10,transformers=4.16", "torch=1.13", "torch=2.4",
                                      "transformers=4.31", "transformers=4.44,bitsandbytes=0.43.1",
                                      "torchtune=0.1,torchao=0.1", "torchtune=0.2",
                                      "bitsandbytes=0.41.1,lightning=2.1.0rc0", "torch=1.x",
                                      "pytorch=2.4"]),
    "--transformer-impl": lambda r: r.choice(["local", "transformer_engine"]),
    "--loss": lambda r: r.choice(["hf", "vocab-parallel", "chunked", "chunked-tokens",
                                  "hf-upcast"]),
    "--loop-keeps-output": None, "--softmax-keeps-input": None, "--output-fp32": None,
    "--loss-chunk": lambda r: str(r.choice([1, 4, 8, 128, 256])),
    "--dropout": lambda r: r.choice(["0", "0.1", "0.5"]),
    "--zero-grad": lambda r: r.choice(["none", "zero"]),
    "--device": lambda r: r.choice(["cuda", "cpu"]),
    "--dp": lambda r: str(r.choice([1, 2, 4, 8, 16, 64])),
    "--zero": lambda r: str(r.choice([0, 1, 2, 3])),
    "--fsdp": lambda r: r.choice(["full", "hybrid", "grad-op", "no-shard"]),
    "--fsdp-version": lambda r: r.choice(["1", "2"]),
    "--fsdp-group": lambda r: r.choice(["2", "4", "8"]),
    "--fsdp-param-dtype": lambda r: r.choice(DTYPES[:3]),
    "--fsdp-reduce-dtype": lambda r: r.choice(DTYPES[:3]),
    "--fsdp-orig-params": None, "--fsdp-no-sync": None, "--fsdp-sync-module-states": None,
    "--distributed-optimizer": None, "--ddp-bucket-view": None, "--load-full": None,
    "--tp": lambda r: str(r.choice([1, 2, 4, 8])),
    "--sp": None,
    "--pp": lambda r: str(r.choice([1, 2, 4])),
    "--vpp": lambda r: str(r.choice([1, 2])),
    "--microbatches": lambda r: str(r.choice([1, 2, 4, 8])),
    "--pp-schedule": lambda r: r.choice(["gpipe", "1f1b", "interleaved-1f1b", "looped-bfs",
                                         "interleaved-zero-bubble", "zbv-zero-bubble", "dualpipev"]),
    "--pp-microbatch-group": lambda r: str(r.choice([2, 3, 4, 6, 8])),
    "--first-stage-layers": lambda r: str(r.choice([1, 2, 3, 5])),
    "--last-stage-layers": lambda r: str(r.choice([1, 2, 3, 5])),
    "--cp": lambda r: str(r.choice([1, 2, 4])),
    "--ep": lambda r: str(r.choice([1, 2, 4, 8])),
    "--moe-dispatcher": lambda r: r.choice(["hf", "alltoall", "allgather", "torchtitan"]),
    "--moe-routing": lambda r: r.choice(["balanced", "worst"]),
    "--moe-capacity-factor": lambda r: r.choice(["1", "1.25", "2"]),
    "--vocab-multiple": lambda r: str(r.choice([1, 64, 128])),
    "--offload": lambda r: r.choice(["none", "optimizer", "params", "activations",
                                     "optimizer,activations", "optimizer,params"]),
    "--allocator": lambda r: r.choice(["none", "cuda"]),
    "--context-reserve": lambda r: r.choice(["0", "500MB", "v100-cuda11.2"]),
    "--gpu": lambda r: r.choice(GPUS),
    "--budget": lambda r: r.choice(["24GB", "80GiB", "16GB"]),
    "--reserve": lambda r: r.choice(["0", "1GiB"]),
    "--explain": None,
    "--units": lambda r: r.choice(["GB", "GiB", "bytes", "MB"]),
    "--format": lambda r: r.choice(["table", "json", "json", "markdown"]),
    "--plot": lambda r: "PLOT",
    "--file": lambda r: os.path.join(ROOT, "configs/examples",
                                     r.choice(sorted(os.listdir(
                                         os.path.join(ROOT, "configs/examples"))))),
    # memest --from: a framework's file of tests/data (its overrides are not drawn).
    "--from": lambda r: r.choice(sorted(
        os.path.join(ROOT, d, f) for d in ("tests/data/gpu/from", "tests/data/from")
        for f in os.listdir(os.path.join(ROOT, d)) if not f.endswith(".md"))),
}
# Options that make more runs valid when drawn together.
GROUPS = [["--dp", "--zero"], ["--dp", "--fsdp"], ["--lora-rank", "--qlora"],
          ["--lora-rank", "--qlora", "--qlora-init"], ["--dp", "--fsdp", "--fsdp-version"],
          ["--tp", "--sp"], ["--pp", "--microbatches"], ["--stack"], ["--stack", "--versions"],
          ["--allocator", "--gpu"],
          ["--dp", "--distributed-optimizer"], ["--loss", "--loss-chunk"]]
MODEL_FLAGS = ["--params", "--model", "--config", "--architecture"]


# An option drawn only with the one it applies to (unless the run is drawn as noise, to reach
# the refusals too).
NEEDS = {"--lora-targets": "--lora-rank", "--lora-dropout": "--lora-rank", "--qlora": "--lora-rank",
         "--double-quant": "--qlora", "--qlora-keeps-input": "--qlora", "--qlora-init": "--qlora",
         "--fsdp-version": "--fsdp", "--fsdp-group": "--fsdp", "--fsdp-param-dtype": "--fsdp",
         "--fsdp-reduce-dtype": "--fsdp", "--fsdp-orig-params": "--fsdp",
         "--fsdp-no-sync": "--fsdp", "--fsdp-sync-module-states": "--fsdp",
         "--loss-chunk": "--loss", "--sp": "--tp", "--vpp": "--pp", "--microbatches": "--pp",
         "--pp-schedule": "--pp", "--pp-microbatch-group": "--pp", "--first-stage-layers": "--pp", "--last-stage-layers": "--pp",
         "--reserve": "--gpu", "--versions": "--stack"}
OPTIMIZER_FLAGS = {"--nesterov": "sgd-momentum", "--amsgrad": "adamw",
                   "--rmsprop-momentum": "rmsprop", "--centered": "rmsprop",
                   "--first-moment": "adafactor"}


def draw(r):
    args = []
    noise = r.random() < 0.1
    if noise or r.random() < 0.97:
        flag = r.choices(MODEL_FLAGS, [2, 12, 1, 1])[0]
        args += [flag, VALUES[flag](r)]
    if noise or r.random() < 0.92:
        args += ["--batch", VALUES["--batch"](r), "--seq", VALUES["--seq"](r)]
    chosen = set()
    for g in GROUPS:
        if r.random() < 0.06:
            chosen.update(g)
    rate = r.choice([0.01, 0.03, 0.06]) if not noise else 0.08
    picked = []
    for flag in VALUES:
        if flag in MODEL_FLAGS or flag in ("--batch", "--seq", "--optimizer"):
            continue
        if flag in chosen or r.random() < rate:
            picked.append(flag)
    if not noise:
        for flag in OPTIMIZER_FLAGS:
            if flag in picked:
                args += ["--optimizer", OPTIMIZER_FLAGS[flag]]
                break
        else:
            if r.random() < 0.3:
                args += ["--optimizer", VALUES["--optimizer"](r)]
        picked = [f for f in picked if f not in NEEDS or NEEDS[f] in picked]
        if "--zero" in picked or "--fsdp" in picked or "--distributed-optimizer" in picked:
            picked.append("--dp")
        if "--gpu" in picked and "--budget" in picked:
            picked.remove("--budget")
    for flag in dict.fromkeys(picked):
        gen = VALUES[flag]
        if flag == "--dp" and not noise:
            args += [flag, r.choice(["2", "4", "8", "16"])]
        else:
            args += [flag] if gen is None else [flag, gen(r)]
    u = r.random()
    if u < 0.08:
        args = ["fit"] + args + (["--gpus", str(r.choice([1, 2, 8]))] if r.random() < 0.3 else [])
        if "--gpu" not in args and "--budget" not in args:
            args += ["--gpu", r.choice(GPUS)]
    elif u < 0.12:
        args = ["compare"] + [a for a in args if a not in ("--amp",)]
        if r.random() < 0.5:
            args += ["--policies", "fp32,amp,bf16"]
    elif u < 0.15:
        args = ["sweep"] + args + ["--batches", "1,2,4"]
    return args


def run_one(binary, args):
    with tempfile.TemporaryDirectory() as tmp:
        plot = os.path.join(tmp, "p.svg")
        argv = [binary] + [plot if a == "PLOT" else a for a in args]
        try:
            p = subprocess.run(argv, capture_output=True, timeout=60,
                               env={**os.environ, "NO_COLOR": "1"})
        except subprocess.TimeoutExpired:
            return {"rc": "timeout", "out": "", "err": "", "plot": ""}
        out = p.stdout
        try:
            doc = json.loads(out)
            if isinstance(doc, dict) and "inputs" in doc:
                # Layout 1 echoed the run as resolved under `inputs`; layout 2 has it under
                # `run`, and `inputs` is a run config (compared by the round-trip tests).
                resolved = doc.pop("inputs") if doc.get("schema_version") == 1 else None
                if resolved is not None:
                    doc["run"] = resolved
                doc.pop("inputs", None)
            if isinstance(doc, dict):
                doc.pop("schema_version", None)
                out = json.dumps(doc, sort_keys=True).encode()
        except ValueError:
            pass
        picture = ""
        if os.path.exists(plot):
            with open(plot, "rb") as f:
                picture = hashlib.sha1(f.read()).hexdigest()
        return {"rc": p.returncode, "out": hashlib.sha1(out).hexdigest(),
                "err": p.stderr.decode(errors="replace")[:2000], "plot": picture}


def main():
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "draw":
        n, seed = int(sys.argv[2]), int(sys.argv[3])
        r = random.Random(seed)
        for i in range(n):
            print(json.dumps({"i": i, "args": draw(r)}))
    elif cmd == "run":
        binary, runs = sys.argv[2], [json.loads(line) for line in open(sys.argv[3])]
        jobs = int(os.environ.get("JOBS", os.cpu_count() or 2))
        with ThreadPoolExecutor(jobs) as pool:
            for run, res in zip(runs, pool.map(lambda x: run_one(binary, x["args"]), runs)):
                print(json.dumps({"i": run["i"], "args": run["args"], **res}), flush=True)
    elif cmd == "compare":
        a = {json.loads(l)["i"]: json.loads(l) for l in open(sys.argv[2])}
        b = {json.loads(l)["i"]: json.loads(l) for l in open(sys.argv[3])}
        diffs = [i for i in a if i not in b or any(a[i][k] != b[i][k]
                                                  for k in ("rc", "out", "err", "plot"))]
        codes = {}
        for x in a.values():
            codes[x["rc"]] = codes.get(x["rc"], 0) + 1
        print(f"{len(a)} runs ({', '.join(f'exit {k}: {v}' for k, v in sorted(codes.items(), key=str))}), "
              f"{len(diffs)} differ")
        for i in diffs[:20]:
            print(" ".join(a[i]["args"]))
            for k in ("rc", "out", "err", "plot"):
                if i in b and a[i][k] != b[i][k]:
                    print(f"  {k}: {a[i][k]!r:.300} -> {b[i][k]!r:.300}")
        sys.exit(1 if diffs else 0)
    elif cmd == "flags":
        text = subprocess.run([sys.argv[2], "--help"], capture_output=True, text=True).stdout
        flags = [w.split(",")[-1] for line in text.splitlines()
                 for w in line.split()[:1] if w.startswith("--") or w.startswith("-h,")]
        missing = [f for f in flags if f not in VALUES and f not in ("--help", "--version")]
        print("\n".join(missing))
        sys.exit(1 if missing else 0)
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
