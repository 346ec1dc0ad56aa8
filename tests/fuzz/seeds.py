#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/) under OUT_DIR, one folder per
target: config.json files for hf_config, run configs for run_config, sizes and counts for units,
small GGUF headers (written here) for gguf, frameworks' config files for from_yaml, from_toml,
from_args and from_json, and every memest command of the README and of the --help examples (one argument per line) for cli.

usage: seeds.py OUT_DIR   (run from the repository root)
"""
import glob
import os
import re
import shlex
import struct
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


def gguf_header(version, layers, vocab, output):
    """A GGUF header (no weights) of a Llama with `layers` layers of width 256 and `vocab` tokens."""
    def text(s):
        return struct.pack("<Q", len(s)) + s.encode()

    kv = [text("general.architecture") + struct.pack("<I", 8) + text("llama")]
    for key, value in [("block_count", layers), ("embedding_length", 256),
                       ("feed_forward_length", 512), ("attention.head_count", 4),
                       ("attention.head_count_kv", 2), ("context_length", 4096)]:
        kv.append(text("llama." + key) + struct.pack("<II", 4, value))
    kv.append(text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, vocab) +
              b"".join(text(f"t{i}") for i in range(vocab)))
    tensors = []

    def tensor(name, dims, ggml_type):
        tensors.append(text(name) + struct.pack("<I", len(dims)) +
                       b"".join(struct.pack("<q", d) for d in dims) + struct.pack("<IQ", ggml_type, 0))

    tensor("token_embd.weight", [256, vocab], 12)  # q4_K
    for layer in range(layers):
        for name, dims, ggml_type in [("attn_q", [256, 256], 12), ("attn_v", [256, 128], 14),
                                      ("ffn_down", [512, 256], 8), ("attn_norm", [256], 0)]:
            tensor(f"blk.{layer}.{name}.weight", dims, ggml_type)
    if output:
        tensor("output.weight", [256, vocab], 14)  # q6_K
    return (b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)) + b"".join(kv) +
            b"".join(tensors))


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
        # memest --from: the frameworks' files of the GPU runs and the small ones of tests/data/from
        "from_yaml": ["tests/data/gpu/from/*.yaml", "tests/data/from/*.yaml", "tests/data/from/*.yml"],
        "from_toml": ["tests/data/gpu/from/*.toml", "tests/data/from/*.toml"],
        "from_args": ["tests/data/gpu/from/*.args", "tests/data/from/*.args"],
        "from_json": ["tests/data/from/*.json"],
    }.items():
        for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
            with open(path, "rb") as f:
                write(os.path.join(out, target), path.replace("/", "_"), f.read())
    for version, layers, vocab, output in [(3, 2, 64, True), (2, 1, 16, False), (3, 4, 300, True)]:
        write(os.path.join(out, "gguf"), f"llama{version}_{layers}_{vocab}.gguf",
              gguf_header(version, layers, vocab, output))
    for i, text in enumerate(UNITS):
        write(os.path.join(out, "units"), f"unit{i}", text.encode())
    for i, args in enumerate(commands()):
        write(os.path.join(out, "cli"), f"readme{i}", "\n".join(args).encode())
    for path in sorted(glob.glob("configs/examples/*.json")):
        write(os.path.join(out, "cli"), "check_" + os.path.basename(path),
              f"check\n{path}\n--format\njson".encode())


if __name__ == "__main__":
    main()
