"""The SVG pictures of --plot, parsed: every drawn stack and line against the numbers.

Run by ctest (python.plot) with MEMEST_BIN naming the CLI. Only the standard library and pytest.
"""

import json
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

BIN = os.environ["MEMEST_BIN"]
NS = {"svg": "http://www.w3.org/2000/svg"}
TOLERANCE = 0.006  # coordinates are printed with two decimals


def run(args, tmp_path, name="plot.svg"):
    path = tmp_path / name
    r = subprocess.run([BIN, *args, "--plot", str(path)], capture_output=True, text=True,
                       check=False)
    return r, path


def ints(text):
    return [int(v) for v in text.split()]


def points(text):
    return [tuple(float(c) for c in p.split(",")) for p in text.split()]


class Picture:
    def __init__(self, path):
        self.root = ET.parse(path).getroot()
        self.top = float(self.root.get("data-y-top"))
        self.bottom = float(self.root.get("data-y-bottom"))
        self.axis = int(self.root.get("data-axis-bytes"))

    def y(self, b):
        return self.bottom - b / self.axis * (self.bottom - self.top)

    def all(self, tag, cls):
        return [e for e in self.root.iter(f"{{{NS['svg']}}}{tag}") if e.get("class") == cls]


RUNS = [
    ["--model", "llama-2-7b", "--batch", "4", "--seq", "4096", "--precision", "bf16",
     "--attention", "flash", "--recompute", "full", "--gpu", "h100-80gb"],
    ["--model", "gpt2", "--batch", "8", "--seq", "1024", "--amp", "--attention", "eager"],
    ["--model", "llama-2-7b", "--batch", "1", "--seq", "2048", "--precision", "bf16",
     "--attention", "eager", "--recompute", "selective", "--dropout", "0.1"],
    ["--model", "tinyllama-1.1b", "--batch", "2", "--seq", "2048", "--precision", "mixed",
     "--dp", "8", "--zero", "3", "--allocator", "cuda", "--gpu", "a10"],
    ["--model", "qwen1.5-moe-a2.7b", "--batch", "1", "--seq", "1024", "--lora-rank", "8",
     "--precision", "bf16"],
]


PIPELINES = [
    ["--model", "llama-2-7b", "--batch", "1", "--seq", "4096", "--tp", "2", "--pp", "2",
     "--precision", "mixed-bf16", "--microbatches", "4"],
    ["--model", "llama-3.2-1b", "--batch", "2", "--seq", "2048", "--pp", "4", "--vpp", "2",
     "--microbatches", "8", "--gpu", "a10"],
]


@pytest.mark.parametrize("args", PIPELINES, ids=lambda a: " ".join(a[:6]))
def test_pipeline_picture_draws_each_stage_up_to_its_peak(args, tmp_path):
    r, path = run(args + ["--format", "json"], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    pic = Picture(path)
    lines = pic.all("polyline", "stage")
    assert [int(l.get("data-stage")) for l in lines] == [s["stage"] for s in doc["stages"]]
    for line, stage in zip(lines, doc["stages"]):
        own = ints(line.get("data-bytes"))
        # The line's highest step is the walk's largest forward or backward moment: the stage's
        # peak in the table unless that is in the optimizer step (as the report's stage's peak
        # says of itself).
        assert max(own) <= stage["peak_bytes"]
        in_step = doc["peak"]["phase"] in ("forward", "backward")
        if stage["peak_bytes"] == doc["peak"]["bytes"] and in_step:
            assert max(own) == stage["peak_bytes"]
        pts = points(line.get("points"))
        assert len(pts) == 2 * len(own)  # a level segment per step
        for i, b in enumerate(own):
            assert abs(pts[2 * i][1] - pic.y(b)) < TOLERANCE
            assert abs(pts[2 * i + 1][1] - pic.y(b)) < TOLERANCE


@pytest.mark.parametrize("args", RUNS, ids=lambda a: " ".join(a[:6]))
def test_step_picture_stacks_sum_to_the_moments_and_the_peak_is_marked(args, tmp_path):
    r, path = run(args + ["--format", "json"], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    pic = Picture(path)
    total = pic.all("polyline", "total")[0]
    totals = ints(total.get("data-bytes"))
    parts = pic.all("polygon", "part")
    assert len(parts) >= 3
    # Each part's polygon: its top edge at the sum of the parts below and itself, its bottom at
    # the sum below; the parts add up to the moment's total, moment by moment.
    below = [0] * len(totals)
    for poly in parts:
        own = ints(poly.get("data-bytes"))
        pts = points(poly.get("points"))
        n = len(own)
        assert len(pts) == 2 * n
        for i in range(n):
            assert abs(pts[i][1] - pic.y(below[i] + own[i])) < TOLERANCE
            assert abs(pts[2 * n - 1 - i][1] - pic.y(below[i])) < TOLERANCE
            assert pts[i][0] == pts[2 * n - 1 - i][0]
        below = [b + o for b, o in zip(below, own)]
    assert below == totals
    for (x, y), b in zip(points(total.get("points")), totals):
        assert abs(y - pic.y(b)) < TOLERANCE
    # The marker sits at the peak the report gives, at the largest moment drawn.
    peak = pic.all("circle", "peak")[0]
    assert int(peak.get("data-bytes")) == doc["peak"]["bytes"] == max(totals)
    k = int(peak.get("data-index"))
    assert totals[k] == max(totals) and k == totals.index(max(totals))
    assert abs(float(peak.get("cy")) - pic.y(max(totals))) < TOLERANCE
    assert abs(float(peak.get("cx")) - points(total.get("points"))[k][0]) < TOLERANCE
    budget = pic.all("line", "budget")
    if doc.get("budget"):
        assert int(budget[0].get("data-bytes")) == doc["budget"]["usable_bytes"]
        assert abs(float(budget[0].get("y1")) - pic.y(doc["budget"]["usable_bytes"])) < TOLERANCE
    else:
        assert not budget


def test_step_picture_walks_every_layer(tmp_path):
    r, path = run(["--model", "gpt2", "--batch", "1", "--seq", "512"], tmp_path)
    assert r.returncode == 0, r.stderr
    phases = [t.text for t in Picture(path).root.iter(f"{{{NS['svg']}}}text")]
    assert "forward" in phases and "backward" in phases and "optimizer" in phases
    totals = ints(Picture(path).all("polyline", "total")[0].get("data-bytes"))
    # 12 layers forward, the loss, 12 layers backward (two moments each), after the backward
    assert len(totals) >= 12 + 2 + 2 * 12 + 3


def test_phase_labels_never_overlap(tmp_path):
    # Issue 23: the step's last phases (grad_copy, optimizer, master_copy, zero_grad) are narrow
    # bands whose labels, at -30 degrees and 11 px apart, overlapped. Two parallel labels at
    # -30 degrees are dx * sin(30 deg) apart across their baselines: at least a text box's height,
    # 1.2 times the font's size (ascent and descent; tests/web/page_test.js measures the boxes).
    for args in (["--model", "llama-3.2-1b", "--batch", "8", "--seq", "2048", "--precision",
                  "mixed-bf16", "--attention", "flash", "--gpu", "a100-80gb"],
                 ["--model", "gpt2", "--batch", "1", "--seq", "512"]):
        r, path = run(args, tmp_path)
        assert r.returncode == 0, r.stderr
        pic = Picture(path)
        font = float(pic.root.get("font-size"))
        xs = [float(t.get("x")) for t in pic.all("text", "phase-label")]
        assert len(xs) >= 4
        for left, right in zip(xs, xs[1:]):
            assert (right - left) * 0.5 >= 1.2 * font - TOLERANCE, (args, xs)


def test_sweep_picture_draws_each_policy_against_the_batch(tmp_path):
    args = ["sweep", "--model", "llama-2-7b", "--seq", "2048", "--batches", "1,2,4,8,16",
            "--policies", "fp32,mixed-bf16,bf16", "--gpu", "h100-80gb", "--format", "jsonl"]
    r, path = run(args, tmp_path)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    pic = Picture(path)
    series = pic.all("polyline", "series")
    assert [s.get("data-label") for s in series] == ["fp32", "mixed-bf16", "bf16"]
    for s in series:
        want = [(row["micro_batch"], row["need_bytes"]) for row in rows
                if row["precision"] == s.get("data-label")]
        assert list(zip(ints(s.get("data-x")), ints(s.get("data-bytes")))) == want
        for (x, y), (_, need) in zip(points(s.get("points")), want):
            assert abs(y - pic.y(need)) < TOLERANCE
    budget = pic.all("line", "budget")[0]
    assert abs(float(budget.get("y1")) - pic.y(int(budget.get("data-bytes")))) < TOLERANCE


@pytest.mark.parametrize("args,message", [
    (["--params", "7B"], "--plot: the step is walked only for a whole run: give --batch and --seq"),
    (["compare", "--params", "7B"], "--plot: not used by compare (an estimate or a sweep draws one)"),
    (["sweep", "--params", "7B", "--batch", "1", "--seq", "8", "--policies", "fp32,bf16"],
     "--plot: a sweep picture needs two or more values of --batches or --seqs"),
])
def test_plot_refusals(args, message, tmp_path):
    r, path = run(args, tmp_path)
    assert r.returncode == 2 and r.stderr == f"memest: error: {message}\n"


def test_plot_to_an_unwritable_path(tmp_path):
    r, _ = run(["--params", "7B", "--batch", "1", "--seq", "8"], tmp_path, "no/such/dir.svg")
    assert r.returncode == 2
    assert r.stderr.startswith("memest: error: --plot: cannot write \"")
    assert r.stderr.endswith("no/such/dir.svg\": No such file or directory\n")


def test_readme_pictures_are_the_current_build_s(tmp_path):
    from pathlib import Path
    import re
    import shlex
    root = Path(__file__).resolve().parents[2]
    commands = []
    for page, count in (("README.md", 2), ("docs/parallelism.md", 1),
                        ("docs/serving.md", 2)):
        found = re.findall(r"```sh\nmemest (.* --plot (docs/\S+\.svg))\n```",
                           (root / page).read_text())
        assert len(found) == count, page
        commands += found
    for line, picture in commands:
        args = shlex.split(line)
        args = args[:args.index("--plot")] + args[args.index("--plot") + 2:]
        r, path = run(args, tmp_path)
        assert r.returncode == 0, r.stderr
        assert path.read_text() == (root / picture).read_text(), f"regenerate {picture}: {line}"


# ---- memest serve --plot: what a device holds, one horizontal bar per row of --fit ----

class Bars:
    """A serve picture: its bars (g.bar) with their parts, and the usable-memory line."""

    def __init__(self, path):
        self.root = ET.parse(path).getroot()
        self.left = float(self.root.get("data-x-left"))
        self.right = float(self.root.get("data-x-right"))
        self.axis = int(self.root.get("data-axis-bytes"))
        g = f"{{{NS['svg']}}}g"
        self.bars = [e for e in self.root.iter(g) if e.get("class") == "bar"]
        self.lines = [e for e in self.root.iter(f"{{{NS['svg']}}}line")
                      if e.get("class") == "budget"]

    def x(self, b):
        return self.left + b / self.axis * (self.right - self.left)

    def parts(self, bar):
        """(part, bytes) of a bar, left to right, each rect checked against the axis."""
        out, below = [], 0
        for r in bar.iter(f"{{{NS['svg']}}}rect"):
            b = int(r.get("data-bytes"))
            assert abs(float(r.get("x")) - self.x(below)) < TOLERANCE
            assert abs(float(r.get("width")) - (self.x(below + b) - self.x(below))) < 2 * TOLERANCE
            out.append((r.get("data-part"), b))
            below += b
        return out


SERVE_FITS = [
    ["--model", "qwen3-8b", "--fit", "concurrency", "--max-model-len", "32768"],
    ["--model", "llama-3.1-8b", "--fit", "context", "--gpu", "l4"],
    ["--model", "qwen2.5-14b", "--fit", "concurrency", "--gpu", "l4"],  # rows with none
    ["--model", "llama-3.1-8b", "--engine", "llama.cpp", "--fit", "context", "--gpu",
     "rtx-4090"],
    ["--model", "qwen3-8b", "--engine", "llama.cpp", "--fit", "concurrency", "--ctx-size",
     "8192", "--gpu", "a10"],
]


def serve_json(args):
    """A plain serve run's JSON; None where vLLM would not start at all."""
    r = subprocess.run([BIN, "serve", *args, "--format", "json"], capture_output=True, text=True,
                       check=False)
    assert r.returncode in (0, 1, 2), r.stderr
    return json.loads(r.stdout) if r.returncode != 2 else None


@pytest.mark.parametrize("args", SERVE_FITS, ids=lambda a: " ".join(a[:6]))
def test_serve_fit_picture_has_a_bar_per_row_of_what_the_row_holds(args, tmp_path):
    r, path = run(["serve", *args, "--format", "json"], tmp_path)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    pic = Bars(path)
    vllm = doc["engine"] == "vllm"
    # The line: vLLM's budget (gpu_memory_utilization 0.9 x total), llama.cpp's whole device.
    usable = int(doc["total_memory_bytes"] * 0.9) if vllm else doc["total_memory_bytes"]
    assert [int(l.get("data-bytes")) for l in pic.lines] == [usable]
    assert abs(float(pic.lines[0].get("x1")) - pic.x(usable)) < TOLERANCE
    assert len(pic.bars) == len(doc["rows"])
    plain = serve_json(args[:args.index("--fit")] + args[args.index("--fit") + 2:])
    for bar, row in zip(pic.bars, doc["rows"]):
        assert bar.get("data-label").startswith(f"{row['weights']}, KV cache {row['kv_cache']}: ")
        assert bar.get("data-best") == ("" if row["best"] is None else str(row["best"]))
        at = row["at_best"] or row["past_best"]
        parts = dict(pic.parts(bar))
        if at is None:  # the estimate refused even 1: nothing to draw
            assert not parts and row["why_not"]
            continue
        assert parts["weights"] == at["weights"]["bytes"]
        if vllm:
            assert parts["activations"] == at["activations"]["peak_bytes"]
            if plain:  # the launch's own non-torch memory (the fit's JSON has no key for it)
                assert parts["non_torch"] == plain["non_torch"]["bytes"]
            # What the value takes of the KV cache, and the blocks left free at it.
            assert parts["kv_cache"] == at["need_bytes"]
            free = at["kv_cache"]["bytes"] - at["need_bytes"]
            assert parts.get("kv_cache_free", 0) == max(free, 0)
        else:
            assert parts["compute_buffer"] == at["compute_buffer"]["bytes"]
            assert parts["kv_cache"] == at["kv_cache"]["bytes"]
            assert sum(parts.values()) == at["need_bytes"]
        # A row that fits stays within the line; one that does not is drawn at 1, past it.
        assert (sum(parts.values()) <= usable) == (row["best"] is not None)


def test_serve_plain_picture_is_the_estimate_s_parts(tmp_path):
    args = ["serve", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--max-model-len", "8192"]
    r, path = run(args + ["--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    pic = Bars(path)
    assert len(pic.bars) == 1
    assert pic.parts(pic.bars[0]) == [
        ("weights", doc["weights"]["bytes"]),
        ("activations", doc["activations"]["peak_bytes"]),
        ("non_torch", doc["non_torch"]["bytes"]),
        ("kv_cache", doc["kv_cache"]["bytes"])]


def test_serve_plain_picture_has_a_bar_per_llama_cpp_device(tmp_path):
    args = ["serve", "--engine", "llama.cpp", "--model", "llama-3.1-8b", "--quantization",
            "Q4_K_M", "--ctx-size", "32768", "--device", "CUDA0,CUDA1", "--tensor-split", "3,1",
            "--gpu", "rtx-4090"]
    r, path = run(args + ["--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    pic = Bars(path)
    assert [b.get("data-label") for b in pic.bars] == [d["device"] for d in doc["per_device"]]
    for bar, d in zip(pic.bars, doc["per_device"]):
        assert pic.parts(bar) == [("weights", d["weights"]["bytes"]),
                                  ("compute_buffer", d["compute_buffer"]["bytes"]),
                                  ("kv_cache", d["kv_cache"]["bytes"])]


def test_serve_plot_to_an_unwritable_path(tmp_path):
    for fit in ([], ["--fit", "context"]):
        r, _ = run(["serve", "--model", "llama-3.2-1b", *fit], tmp_path, "no/such/dir.svg")
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == (f"memest: error: --plot: cannot write \"{tmp_path}/no/such/dir.svg\": "
                            "No such file or directory\n")
