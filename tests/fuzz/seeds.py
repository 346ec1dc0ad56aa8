#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/) under OUT_DIR, one folder per
target: config.json files for hf_config, run configs for run_config, sizes and counts for units,
and every memest command of the README and of the --help examples (one argument per line) for cli.

usage: seeds.py OUT_DIR   (run from the repository root)
"""
import glob
import os
import re
import shlex
import sys

UNITS = ["7B", "6.7B", "125M", "350k", "1.3e9", "6738415616", "80GiB", "80GB", "512MiB", "1.5TB",
         "4096B", "1000000", "1.00000000000000000000000000B", "1e400", "GB", "GiB", "bytes", "kB",
         "0.5", "-1", "18446744073709551616", "1e-30GB"]


def commands():
    """The memest commands of README.md and docs/*.md ("$ memest ..." lines), as argument lists."""
    for path in ["README.md"] + sorted(glob.glob("docs/*.md")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^\$ memest(.*)$", line.rstrip("\n"))
                if m:
                    yield shlex.split(m.group(1).split("|")[0])


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1]
    for target, patterns in {
        "hf_config": ["configs/models/*.json", "tests/data/models/*.json"],
        "run_config": ["configs/examples/*.json", "tests/data/runs/*.json",
                       "tests/data/bad/*.json", "tests/data/bad/hostile/*.json"],
    }.items():
        for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
            with open(path, "rb") as f:
                write(os.path.join(out, target), path.replace("/", "_"), f.read())
    for i, text in enumerate(UNITS):
        write(os.path.join(out, "units"), f"unit{i}", text.encode())
    for i, args in enumerate(commands()):
        write(os.path.join(out, "cli"), f"readme{i}", "\n".join(args).encode())
    for path in sorted(glob.glob("configs/examples/*.json")):
        write(os.path.join(out, "cli"), "check_" + os.path.basename(path),
              f"check\n{path}\n--format\njson".encode())


if __name__ == "__main__":
    main()
