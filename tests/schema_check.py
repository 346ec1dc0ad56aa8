#!/usr/bin/env python3
"""The JSON Schema (configs/schema/run.schema.json) and memest's loader agree: every example
config is valid for both, every config in tests/data/bad is rejected by both, and the `inputs`
of a JSON result (a run config) is valid.

usage: schema_check.py MEMEST_BINARY   (run from the repository root)
"""
import glob
import json
import subprocess
import sys

import jsonschema


# Runs whose JSON `inputs` must validate: a stack, QLoRA with its loading, FSDP, ZeRO offload.
INPUTS_RUNS = [
    ["--params", "7B"],
    ["--model", "llama-2-7b", "--batch", "1", "--seq", "256", "--stack", "torchtune",
     "--lora-rank", "8", "--qlora", "--layer-clones", "--gpu", "a100-80gb"],
    ["--model", "gpt2", "--batch", "2", "--seq", "128", "--dp", "8", "--fsdp", "hybrid",
     "--fsdp-group", "4", "--fsdp-version", "1", "--fsdp-orig-params", "--budget", "24GB"],
    ["--config", "configs/models/gpt2.json", "--batch", "1", "--seq", "64", "--dp", "2",
     "--zero", "3", "--offload", "optimizer,params", "--model-loading", "full"],
]


def schema_accepts(validator, path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except json.JSONDecodeError:
        return False
    return not list(validator.iter_errors(doc))


def main():
    memest = sys.argv[1]
    with open("configs/schema/run.schema.json") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    passed = failed = 0
    cases = [(p, True) for p in sorted(glob.glob("configs/examples/*.json"))]
    cases += [(p, False) for p in sorted(glob.glob("tests/data/bad/*.json"))]
    for path, valid in cases:
        schema_ok = schema_accepts(validator, path)
        if valid:
            loader = subprocess.run([memest, "check", path], capture_output=True, text=True)
            loader_ok = loader.returncode == 0
        else:
            loader = subprocess.run([memest, "--file", path], capture_output=True, text=True)
            loader_ok = loader.returncode != 2
        if schema_ok == valid and loader_ok == valid:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {path}: expected {'valid' if valid else 'invalid'}, schema says "
                  f"{'valid' if schema_ok else 'invalid'}, memest exit {loader.returncode}: "
                  f"{loader.stdout.strip()} {loader.stderr.strip()}")
    for args in INPUTS_RUNS:
        out = subprocess.run([memest, *args, "--format", "json"], capture_output=True, text=True)
        errors = list(validator.iter_errors(json.loads(out.stdout)["inputs"])) if out.stdout else [
            out.stderr]
        if errors:
            failed += 1
            print(f"FAIL inputs of {' '.join(args)}: {errors[0]}")
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed < 10 else 0


if __name__ == "__main__":
    sys.exit(main())
