#!/usr/bin/env python3
"""The JSON Schema (configs/schema/run.schema.json) and memest's loader agree: every example
config is valid for both, and every config in tests/data/bad is rejected by both.

usage: schema_check.py MEMEST_BINARY   (run from the repository root)
"""
import glob
import json
import subprocess
import sys

import jsonschema


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
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed < 10 else 0


if __name__ == "__main__":
    sys.exit(main())
