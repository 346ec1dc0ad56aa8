"""The Python module against the command line: the same documents, the same errors.

Run by ctest (python.module) with MEMEST_BIN naming the CLI and the module on PYTHONPATH.
"""

import json
import os
import random
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import memest

BIN = os.environ["MEMEST_BIN"]
ROOT = Path(__file__).resolve().parents[2]
OPTIONS = memest.options()
BY_FLAG = {o["flag"]: o for o in OPTIONS}
COMMANDS = {"estimate": memest.estimate, "fit": memest.fit, "compare": memest.compare}
# Keywords of the subcommands beyond the run options (python/memest_module.cpp).
EXTRA_FLAGS = {"--file": "file", "--from": "from_file", "--for": "target", "--gpus": "gpus",
               "--max": "max", "--policies": "policies", "--batches": "batches",
               "--seqs": "seqs", "--optimizers": "optimizers"}
BOOLEAN_EXTRAS = set()


def cli(args):
    r = subprocess.run([BIN, *args], capture_output=True, text=True, check=False)
    return r.returncode, r.stdout, r.stderr


def kwargs_of(args):
    """The keywords of a command line: `--lora-rank 16` is lora_rank="16", `--qlora` True."""
    kw, i = {}, 0
    while i < len(args):
        flag, value = args[i], None
        if "=" in flag:
            flag, value = flag.split("=", 1)
        boolean = flag in BOOLEAN_EXTRAS or (flag in BY_FLAG and BY_FLAG[flag]["type"] == "bool")
        if not boolean and value is None:
            i += 1
            value = args[i]
        key = BY_FLAG[flag]["keyword"] if flag in BY_FLAG else EXTRA_FLAGS[flag]
        kw[key] = True if boolean else value
        i += 1
    return kw


def readme_commands():
    text = (ROOT / "README.md").read_text()
    out = []
    for m in re.finditer(r"<!-- readme-test -->\n```console\n\$ memest (.*)\n", text):
        args = shlex.split(m.group(1))
        command = args[0] if args and not args[0].startswith("-") else "estimate"
        if command in COMMANDS and "--help" not in args:
            out.append((command, args[1:] if command != "estimate" else args))
    return out


def cli_json(command, args):
    code, out, err = cli(([] if command == "estimate" else [command]) + args + ["--format", "json"])
    assert code in (0, 1), err
    return out


@pytest.mark.parametrize("command,args", readme_commands(), ids=lambda v: str(v)[:60])
def test_readme_examples_give_the_cli_document_byte_for_byte(command, args):
    out = cli_json(command, args)
    doc = COMMANDS[command](**kwargs_of(args))
    assert doc == json.loads(out)
    # The same text: key order, integers and floats as the CLI prints them.
    assert json.dumps(doc, indent=2, ensure_ascii=False) + "\n" == out


def test_readme_has_estimates_and_subcommands():
    commands = [c for c, _ in readme_commands()]
    assert commands.count("estimate") >= 3 and "compare" in commands and "fit" in commands


SCHEMA = memest.schema()
PRESETS = [m["name"] for m in json.loads(cli(["models", "--format", "json"])[1])["models"]]


def schema_of(option):
    """The schema of an option's key (a section with a short form is anyOf string, object)."""
    prop = SCHEMA["properties"][option["section"]]
    prop = prop if "properties" in prop else next(a for a in prop["anyOf"] if "properties" in a)
    return prop["properties"][option["key"]]


def enum_of(option):
    return schema_of(option).get("enum")


def random_run(rng):
    """A run drawn from the option table and the schema's enumerations (fixed seed)."""
    kw = {"batch": rng.choice([1, 2, 3, 8]), "seq": rng.choice([128, 512, 1000, 2048, 4096])}
    kw["model"] = rng.choice(PRESETS)
    for option in OPTIONS:
        k = option["keyword"]
        if k in kw or k in ("model", "params", "config", "architecture", "file"):
            continue
        if option["alias_of"] is not None:
            continue  # drawn as the option it spells
        values = enum_of(option)
        if k == "model_loading":
            values = ["none", "layer-clones", "full"]  # the NF4 ways need QLoRA
        if k in ("moe_dispatcher", "moe_routing", "moe_capacity_factor"):
            continue  # the all-to-all dispatcher needs a model with experts (its own test)
        if option["type"] == "bool":
            if rng.random() < 0.02:
                kw[k] = True
        elif values and rng.random() < 0.25:
            kw[k] = rng.choice([v for v in values if v != "none"] or values)
        elif option["type"] == "N" and rng.random() < 0.06:
            kw[k] = rng.choice([1, 2, 4])
    if "lora_rank" not in kw:
        kw.pop("adapter_dtype", None)  # the adapters' dtype needs adapters
    if "fsdp" in kw or "distributed_optimizer" in kw or kw.get("offload") == "params":
        kw["dp"] = 8  # these shard over data-parallel ranks
    if kw.get("offload") == "params":
        kw["zero"] = 3
    if rng.random() < 0.3:
        kw["gpu"] = rng.choice(["h100-80gb", "a10", "t4"])
    return kw


def args_of(kw):
    args = []
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else [flag, str(v)]
    return args


def test_random_runs_agree_with_the_cli():
    rng = random.Random(13)

    def one(kw):
        code, out, err = cli(args_of(kw) + ["--format", "json"])
        try:
            got = memest.estimate(**kw)
        except memest.Error as e:
            return code == 2 and err == "".join(f"memest: error: {line}\n"
                                                for line in str(e).split("\n")), kw, "invalid"
        return code in (0, 1) and got == json.loads(out), kw, "valid"

    results = []
    with ThreadPoolExecutor(max_workers=2) as pool:  # until 200 whole runs (or 700 drawn)
        while sum(kind == "valid" for *_, kind in results) < 200 and len(results) < 700:
            results += pool.map(one, [random_run(rng) for _ in range(50)])
    bad = [kw for ok, kw, _ in results if not ok]
    assert not bad, bad[:3]
    valid = sum(1 for _, _, kind in results if kind == "valid")
    assert valid >= 200, valid  # a few hundred whole runs, and the refused ones refused alike


@pytest.mark.parametrize("kw", [
    {"params": "7B", "optimizer": "adamw8"},
    {"model": "llama-2-7b", "batch": 0, "seq": 128},
    {"model": "no-such-model"},
    {"params": "7B", "batch": "four", "seq": 128},
    {"params": "7B", "dropout": -0.1, "batch": 1, "seq": 8},
    {"params": "7B", "file": "tests/data/bad/bool_type.json"},
    {"params": "7B", "precision": ""},
    {"model": "gpt2", "qlora": True},
])
def test_bad_arguments_raise_the_cli_message(kw):
    with pytest.raises(memest.Error) as e:
        memest.estimate(**kw)
    assert isinstance(e.value, ValueError)
    args = []
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        args += [flag] if v is True else [f"{flag}={v}"]
    code, _, err = cli(args)
    assert code == 2
    assert err == "".join(f"memest: error: {line}\n" for line in str(e.value).split("\n"))


def test_unknown_and_mistyped_keywords_are_type_errors():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'sqe' \(did you mean \"seq\"\?\)"):
        memest.estimate(params="7B", sqe=4)
    with pytest.raises(TypeError, match="batch: expected a str, int or float, got bool"):
        memest.estimate(params="7B", batch=True)
    with pytest.raises(TypeError, match="qlora: expected a bool, got str"):
        memest.estimate(params="7B", qlora="yes")


def test_fit_compare_and_a_check_that_fails():
    over = memest.estimate(model="llama-2-7b", batch=8, seq=4096, gpu="t4")
    assert over["budget"]["fits"] is False  # exit code 1 is an answer, not an error
    fit = memest.fit(model="llama-2-7b", seq=4096, gpu="a100-80gb", precision="mixed-bf16",
                     attention="flash", dp=8, zero=3)
    code, out, _ = cli(["fit", "--model", "llama-2-7b", "--seq", "4096", "--gpu", "a100-80gb",
                        "--precision", "mixed-bf16", "--attention", "flash", "--dp", "8",
                        "--zero", "3", "--format", "json"])
    assert code == 0 and fit == json.loads(out)
    cmp = memest.compare(params="7B", policies=["fp32", "bf16"])
    assert cmp == json.loads(cli(["compare", "--params", "7B", "--policies", "fp32,bf16",
                                  "--format", "json"])[1])


def test_sweep_is_an_iterator_of_the_cli_rows():
    rows = memest.sweep(model="gpt2", batches=[1, 2, 4], seqs="512,1024",
                        policies=("fp32", "bf16"), gpu="t4")
    assert iter(rows) is rows
    _, out, _ = cli(["sweep", "--model", "gpt2", "--batches", "1,2,4", "--seqs", "512,1024",
                     "--policies", "fp32,bf16", "--gpu", "t4", "--format", "jsonl"])
    expected = [json.loads(line) for line in out.splitlines()]
    assert list(rows) == expected and len(expected) == 12
    with pytest.raises(memest.Error, match="sweep needs a list to sweep"):
        memest.sweep(model="gpt2", batch=1, seq=128)


def test_config_takes_a_dict_or_a_path():
    path = ROOT / "configs/models/llama-2-7b.json"
    as_dict = json.loads(re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M))
    by_dict = memest.estimate(config=as_dict, batch=1, seq=512)
    by_path = memest.estimate(config=str(path), batch=1, seq=512)
    assert by_dict["categories"] == by_path["categories"]
    assert by_dict["peak"] == by_path["peak"]
    assert memest.estimate(config=path, batch=1, seq=512) == by_path  # os.PathLike
    assert memest.estimate(params=7_000_000_000)["total"]["bytes"] == 112_000_000_000


def test_schema_is_the_cli_schema():
    assert memest.schema() == json.loads(cli(["schema"])[1])


def test_options_carry_the_choices_the_schema_enumerates():
    for o in OPTIONS:
        if o["kind"] == "choice":
            s = schema_of(o)
            enums = [e for e in [s.get("enum")] + [a.get("enum") for a in s.get("anyOf", [])] if e]
            assert o["choices"] in [[str(v) for v in e] for e in enums], o
        if o["default"] is not None and o["kind"] == "choice":
            assert o["default"] in o["choices"], o
        if o["alias_of"] is not None:
            assert o["alias_of"] in BY_FLAG and BY_FLAG[o["alias_of"]]["alias_of"] is None
    assert BY_FLAG["--model-code"]["choices"] == ["hf", "litgpt"]


def test_a_result_reproduces_itself_through_file(tmp_path):
    kw = dict(model="llama-2-7b", batch=1, seq=512, stack="torchtune", lora_rank=8, qlora=True,
              layer_clones=True, allocator="cuda", gpu="a100-80gb")
    first = memest.estimate(**kw)
    assert first["inputs"]["model"]["loading"] == "layer-clones,nf4-chunked"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(first["inputs"]))
    second = memest.estimate(file=path)
    assert second["inputs"] == first["inputs"]
    assert second["categories"] == first["categories"] and second["peak"] == first["peak"]


def test_help_lists_every_option_with_its_doc():
    doc = memest.estimate.__doc__
    for o in OPTIONS:
        assert f"    {o['keyword']} (" in doc and o["help"] in doc
        assert f"[run config: {o['section']}.{o['key']}]" in doc
    assert memest.__version__ == cli(["--version"])[1].split()[1]


def test_plot_keyword_writes_the_cli_picture(tmp_path):
    memest.estimate(model="gpt2", batch=2, seq=512, gpu="t4", plot=tmp_path / "m.svg")
    cli(["--model", "gpt2", "--batch", "2", "--seq", "512", "--gpu", "t4", "--plot",
         str(tmp_path / "c.svg")])
    assert (tmp_path / "m.svg").read_text() == (tmp_path / "c.svg").read_text()
    list(memest.sweep(model="gpt2", seq=512, batches=[1, 2, 4], plot=str(tmp_path / "s.svg")))
    assert (tmp_path / "s.svg").read_text().startswith("<svg")
    # serve's plot keyword is its --plot row: the CLI's picture of --fit's rows.
    memest.serve(model="llama-3.1-8b", fit="context", gpu="l4", plot=tmp_path / "f.svg")
    cli(["serve", "--model", "llama-3.1-8b", "--fit", "context", "--gpu", "l4", "--plot",
         str(tmp_path / "g.svg")])
    assert (tmp_path / "f.svg").read_text() == (tmp_path / "g.svg").read_text()
    assert 'class="bar"' in (tmp_path / "f.svg").read_text()


def test_from_file_takes_a_path_and_its_overrides_as_a_list():
    path = str(ROOT / "tests/data/gpu/from/torchtune-1814feb17-llama3_2-3B_lora_single_device.yaml")
    overrides = ["batch_size=2", "tokenizer.max_seq_len=4096"]
    doc = memest.estimate(from_file=[path, *overrides], gpu="a100-80gb")
    assert doc == json.loads(cli_json("estimate", ["--from", path, *overrides, "--gpu", "a100-80gb"]))
    assert doc["from"]["format"] == "torchtune"
    assert memest.estimate(from_file=path, batch=2, seq=512)["inputs"]["training"]["micro_batch"] == 2


# ---- memest.serve: keywords from the serve option table ----

SERVE_OPTIONS = memest.serve_options()
SERVE_BY_FLAG = {o["flag"]: o for o in SERVE_OPTIONS}
SERVE_RUNS = [
    ["--model", "llama-3.1-8b", "--max-model-len", "8192"],
    ["--model", "qwen3-8b", "--gpu", "a100-80gb", "--kv-cache-dtype", "fp8", "--enforce-eager",
     "--gpu-memory-utilization", "0.95"],
    ["--model", "llama-3-70b", "--tp", "2", "--gpu", "a100-80gb", "--max-model-len", "131072"],
    ["--model", "llama-3.1-8b", "--engine", "llama.cpp", "--ctx-size", "16384", "--parallel", "4",
     "--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "--flash-attn",
     "--quantization", "Q4_K_M"],
    ["--model", "qwen3-8b", "--engine", "llama.cpp", "--quantization", "Q5_K_M",
     "--gpu", "rtx-4090", "--fit", "context"],
    ["--model", "llama-3.1-8b", "--gpu-memory", "24GiB", "--fit", "concurrency", "--max", "512"],
    ["--model", "qwen3-8b", "--engine", "hf", "--prompt-len", "4096", "--max-new-tokens", "512",
     "--batch-size", "4", "--quantization", "bnb-4bit", "--attn-implementation", "eager"],
    ["--model", "llama-3.1-8b", "--engine", "hf", "--max-new-tokens", "256", "--gpu", "l4",
     "--fit", "context", "--cache-implementation", "static"],
]


def serve_kwargs_of(args):
    """serve()'s keywords of a serve command line: `--ctx-size 8192` is ctx_size="8192"."""
    kw, i = {}, 0
    while i < len(args):
        o = SERVE_BY_FLAG[args[i]]
        if o["type"] == "bool":
            kw[o["keyword"]] = True
        else:
            i += 1
            kw[o["keyword"]] = args[i]
        i += 1
    return kw


@pytest.mark.parametrize("args", SERVE_RUNS, ids=[" ".join(a) for a in SERVE_RUNS])
def test_serve_gives_the_cli_document(args):
    code, out, err = cli(["serve", *args, "--format", "json"])
    assert code in (0, 1), err
    assert memest.serve(**serve_kwargs_of(args)) == json.loads(out)


def test_serve_keywords_are_the_table_rows_and_take_numbers():
    keywords = {o["keyword"] for o in SERVE_OPTIONS}
    assert {"model", "engine", "max_model_len", "kv_cache_dtype", "ctx_size", "cache_type_k",
            "flash_attn", "fit", "file"} <= keywords
    assert not keywords & {"format", "units", "help", "h"}
    by_kw = {o["keyword"]: o for o in SERVE_OPTIONS}
    assert by_kw["ctx_size"]["engine"] == "llama.cpp"
    assert by_kw["context_length"]["engine"] == "sglang"
    assert by_kw["dtype"]["engine"] == ["vllm", "sglang", "hf"]
    assert by_kw["model"]["engine"] == "all"
    assert by_kw["kv_cache_dtype"]["sglang_choices"] == ["auto", "fp8_e5m2", "fp8_e4m3"]
    assert "float32" in by_kw["dtype"]["hf_choices"]
    assert by_kw["kv_cache_dtype"]["choices"] == ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert "Q4_K_M" in by_kw["quantization"]["llama_cpp_choices"]
    assert by_kw["tp"]["alias_of"] == "--tensor-parallel-size"
    # An int is its decimal text, as the CLI takes it.
    assert memest.serve(model="llama-3.1-8b", max_model_len=8192) == memest.serve(
        model="llama-3.1-8b", max_model_len="8192")
    assert memest.serve(model="llama-3.1-8b", enforce_eager=True)["cuda_graphs"]["bytes"] == 0


def test_serve_errors_are_the_cli_messages():
    code, _, err = cli(["serve", "--model", "llama-3.1-8b", "--ctx-size", "4096"])
    assert code == 2
    with pytest.raises(memest.Error) as e:
        memest.serve(model="llama-3.1-8b", ctx_size=4096)
    assert str(e.value) == err.removeprefix("memest: error: ").rstrip("\n")
    with pytest.raises(TypeError, match="did you mean 'max_model_len'|did you mean \"max_model_len\""):
        memest.serve(model="llama-3.1-8b", max_modle_len=4096)
    with pytest.raises(TypeError):
        memest.serve(model="llama-3.1-8b", enforce_eager="yes")


def test_serve_file_and_schema(tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"model": "llama-3.1-8b", "max_model_len": 4096, "tp": 2}))
    by_file = memest.serve(file=run, max_model_len=2048)
    assert by_file == memest.serve(model="llama-3.1-8b", tp=2, max_model_len=2048)
    assert memest.schema(serve=True) == json.loads(cli(["schema", "--serve"])[1])
    schema = memest.schema(serve=True)
    for o in SERVE_OPTIONS:
        if (o["config_key"] and o["kind"] == "choice" and o["llama_cpp_choices"] == o["choices"]
                and o["hf_choices"] == o["choices"]):
            assert schema["properties"][o["keyword"]]["enum"] == o["choices"], o["flag"]
