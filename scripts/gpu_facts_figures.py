#!/usr/bin/env python3
"""Accuracy figures of the published GPU runs (tests/data/gpu) through one memest binary.

    python3 scripts/gpu_facts_figures.py BINARY [RUNS]   # RUNS: runs_facts.jsonl (default)

Prints each run's estimate and signed error against its measured case, then the median |error|,
the share within 10%, the largest |error| and the signed median: the figures issue 21 holds the
facts-only runs (only what each source states, plus --stack and --versions) to.
"""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def estimated(run, doc):
    peak = doc["peak"]
    if run["reads"] == "reserved":
        return peak["reserved_bytes"]
    if run["reads"] == "nvidia-smi":
        return peak["nvidia_smi_bytes"]
    stages = doc["stages"]
    on = stages[-1] if stages else peak
    if on.get("allocated_bytes") is not None:
        return on["allocated_bytes"]
    return on["peak_bytes" if stages else "bytes"]


def main():
    binary = sys.argv[1]
    runs = sys.argv[2] if len(sys.argv) > 2 else "runs_facts.jsonl"
    data = os.path.join(ROOT, "tests/data/gpu")
    cases = {}
    with open(os.path.join(data, "cases.jsonl")) as f:
        for line in f:
            c = json.loads(line)
            cases[c["id"]] = c["measured"]["bytes"]
    errors = []
    with open(os.path.join(data, runs)) as f:
        for line in f:
            run = json.loads(line)
            args = [os.path.join(ROOT, a) if a.startswith("tests/") else a for a in run["args"]]
            p = subprocess.run([binary] + args + ["--format", "json"], capture_output=True,
                               text=True, check=True)
            e = estimated(run, json.loads(p.stdout))
            err = e / cases[run["id"]] - 1
            errors.append(err)
            print(f"{run['id']:60s} {e:>16d} {err * 100:+7.1f}%")
    absolute = [abs(x) for x in errors]
    within = sum(x <= 0.10 for x in absolute)
    print(f"{len(errors)} runs: median |error| {statistics.median(absolute) * 100:.1f}%, "
          f"{within}/{len(errors)} within 10%, worst {max(errors, key=abs) * 100:+.1f}%, "
          f"signed median {statistics.median(errors) * 100:+.1f}%")


if __name__ == "__main__":
    main()
