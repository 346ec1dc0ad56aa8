#!/usr/bin/env python3
"""The serve run configs' JSON Schema (configs/schema/serve.schema.json) and memest serve --file
agree: every config in configs/serve is valid for both (memest serve exits 0 or 1), every config
in tests/data/bad_serve is rejected by both (memest serve exits 2 with one line), and the schema
is the one `memest schema --serve` prints.

usage: serve_schema_check.py MEMEST_BINARY   (run from the repository root)
"""
import glob
import json
import subprocess
import sys

import jsonschema


def schema_accepts(validator, path):
    with open(path) as f:
        return not list(validator.iter_errors(json.load(f)))


def main():
    memest = sys.argv[1]
    with open("configs/schema/serve.schema.json") as f:
        text = f.read()
    printed = subprocess.run([memest, "schema", "--serve"], capture_output=True, text=True).stdout
    passed = failed = 0
    if printed != text:
        failed += 1
        print("FAIL configs/schema/serve.schema.json is not what memest schema --serve prints")
    schema = json.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    cases = [(p, True) for p in sorted(glob.glob("configs/serve/*.json"))]
    cases += [(p, False) for p in sorted(glob.glob("tests/data/bad_serve/*.json"))]
    for path, valid in cases:
        schema_ok = schema_accepts(validator, path)
        run = subprocess.run([memest, "serve", "--file", path], capture_output=True, text=True)
        loader_ok = run.returncode in (0, 1)
        one_line = valid or run.stderr.count("\n") == 1
        if schema_ok == valid and loader_ok == valid and one_line:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {path}: expected {'valid' if valid else 'invalid'}, schema says "
                  f"{'valid' if schema_ok else 'invalid'}, memest serve exit {run.returncode}: "
                  f"{run.stderr.strip()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed < 10 else 0


if __name__ == "__main__":
    sys.exit(main())
